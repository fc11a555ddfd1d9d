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

The data directory's lock and the incarnation that held it (``claim_data_dir``). A broker
process takes an exclusive ``flock`` on ``DATA_DIR/.lock`` (Kafka's ``.lock``) before it
registers; the kernel drops the lock when the process dies, however it dies. The holder
names itself in ``DATA_DIR/broker-incarnation`` (fsynced before it registers), so the next
holder knows which incarnation held the directory before it and can tell the controller that
one is dead (``RegisterBroker.previous_incarnation_id``): its registration then replaces the
dead one's at once instead of waiting out its session. A directory another process holds
gives no such proof: the broker starts, logs it, and registers without it. JSON::

    {"version": 0, "incarnation_id": "0176705927da46a4b9a23c97aadf138b"}
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os

from storage.fileio import FileLayer, default_file_layer

log = logging.getLogger(__name__)

MARKER_NAME = "broker-clean-shutdown"
LOCK_NAME = ".lock"
INCARNATION_NAME = "broker-incarnation"
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


@dataclasses.dataclass
class DataDirClaim:
    """What ``claim_data_dir`` found: the lock (None: another process holds the directory)
    and the incarnation that held the directory before (None: unknown)."""

    lock_fd: int | None
    previous_incarnation_id: str | None

    def release(self) -> None:
        """Drop the lock (a clean stop; a crash drops it too)."""
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


def claim_data_dir(
    data_dir: str | os.PathLike[str], incarnation_id: str, files: FileLayer | None = None
) -> DataDirClaim:
    """Lock ``data_dir`` and record ``incarnation_id`` as its holder (durably); answer the
    incarnation that held it before. Without the lock, answer no previous incarnation and
    leave the record alone: its holder may be alive."""
    files = files or default_file_layer()
    os.makedirs(data_dir, exist_ok=True)
    fd = os.open(os.path.join(data_dir, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        log.warning(
            "%s: locked by another process (%s): registering without naming the previous "
            "incarnation, so a live older one is waited out",
            data_dir,
            e,
        )
        return DataDirClaim(None, None)
    path = os.path.join(data_dir, INCARNATION_NAME)
    previous: str | None = None
    if files.exists(path):
        try:
            data = json.loads(files.read_file(path))
            if (
                isinstance(data, dict)
                and data.get("version") == _VERSION
                and isinstance(data.get("incarnation_id"), str)
            ):
                previous = data["incarnation_id"]
            else:
                log.warning("%s: not an incarnation record this version reads: %r", path, data)
        except (OSError, ValueError) as e:
            log.warning("%s: unreadable incarnation record (%s)", path, e)
    try:
        body = json.dumps({"version": _VERSION, "incarnation_id": incarnation_id}).encode()
        files.write_file_atomic(path, body)
    except OSError as e:
        # The previous incarnation is dead all the same; the next process will name an
        # older one, which the controller no longer has, and wait out our session: safe.
        log.warning("%s: cannot record this incarnation (%s)", path, e)
    return DataDirClaim(fd, previous)
