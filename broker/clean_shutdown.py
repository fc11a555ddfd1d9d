"""The broker's clean-shutdown marker (KIP-966's ``CleanShutdownFile``).

A broker whose logs were all flushed and closed without an error writes
``DATA_DIR/broker-clean-shutdown``, naming the broker epoch of the registration it held; the
next process reads it and deletes it (the deletion made durable) before it registers or
opens a log, and registers with that epoch as ``previous_broker_epoch``. The controller
believes the logs whole only if the epoch is the one of the registration being replaced; any
other value, or no marker (a crash, a power cut, a kill), means the broker may have lost
writes it had not flushed: it leaves every ISR and ELR, so it is not elected while a replica
that holds the acknowledged writes exists (finding 1b of docs/fault-injection.md).

A marker a power cut brings back after it was deleted, or one an older incarnation left,
names an epoch the controller no longer has, so it cannot pass a broker that lost data for a
clean one. JSON::

    {"version": 0, "broker_epoch": 1234}

Writes go through the storage file layer (``storage.fileio.default_file_layer``), so the
fault-injection suite's lazy layer sees them like every other file.
"""

from __future__ import annotations

import json
import logging
import os

from storage.fileio import FileLayer, default_file_layer

log = logging.getLogger(__name__)

MARKER_NAME = "broker-clean-shutdown"
_VERSION = 0


def take_marker(data_dir: str | os.PathLike[str], files: FileLayer | None = None) -> int | None:
    """The broker epoch the marker in ``data_dir`` names, or None; the marker is deleted
    (durably) either way, so a crash of this process is never taken for a clean shutdown."""
    files = files or default_file_layer()
    path = os.path.join(data_dir, MARKER_NAME)
    if not files.exists(path):
        return None
    epoch: int | None = None
    try:
        data = json.loads(files.read_file(path))
        if (
            isinstance(data, dict)
            and data.get("version") == _VERSION
            and type(data.get("broker_epoch")) is int
            and data["broker_epoch"] >= 0
        ):
            epoch = data["broker_epoch"]
        else:
            log.warning("%s: not a clean-shutdown marker this version reads: %r", path, data)
    except (OSError, ValueError) as e:
        log.warning(
            "%s: unreadable clean-shutdown marker (%s): taken as an unclean shutdown", path, e
        )
    files.unlink(path)
    files.fsync_dir(str(data_dir))
    return epoch


def write_marker(
    data_dir: str | os.PathLike[str], broker_epoch: int, files: FileLayer | None = None
) -> None:
    """Record a clean shutdown of the incarnation registered with ``broker_epoch``. Call only
    once every log is flushed and closed."""
    files = files or default_file_layer()
    os.makedirs(data_dir, exist_ok=True)
    body = json.dumps({"version": _VERSION, "broker_epoch": int(broker_epoch)}).encode()
    files.write_file_atomic(os.path.join(data_dir, MARKER_NAME), body)
