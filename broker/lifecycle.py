"""``BrokerLifecycle``: a broker's registration, heartbeats and controlled shutdown (KIP-631).

Kafka's ``BrokerLifecycleManager``. States (``BrokerState``, Kafka's ``BrokerState.java``)::

    NOT_RUNNING --start()--> STARTING --registered--> RECOVERY --heartbeat: unfenced--> RUNNING
    RECOVERY | RUNNING --shutdown()--> PENDING_CONTROLLED_SHUTDOWN
        --heartbeat: should_shutdown (or the timeout)--> SHUTTING_DOWN --> NOT_RUNNING
    STARTING --shutdown()--> SHUTTING_DOWN

* STARTING: ``RegisterBroker`` with a fresh incarnation id (one per process), the
  broker's endpoints and ``previous_broker_epoch`` (KIP-966: the epoch the clean-shutdown
  marker names, ``broker.clean_shutdown``; -1 after an unclean shutdown, which takes the
  broker out of every ISR and ELR), retried until the active controller answers. The answer's broker epoch
  is the offset of the ``RegisterBrokerRecord``. ``DUPLICATE_BROKER_REGISTRATION`` (an older
  incarnation of this id still holds a session) is retried until that session expires;
  after a SIGKILL or a power cut it is not raised, because the registration names the
  incarnation that held the data directory before (``previous_incarnation_id``).
* RECOVERY: fenced. Heartbeats every ``heartbeat_interval_s`` (2 s) report the metadata
  follower's offset; the controller unfences the broker once that offset reaches the broker
  epoch (it has replayed its own registration). A heartbeat also goes out at once when the
  follower reaches the epoch, so catching up does not wait for the next tick.
* Every heartbeat carries ``replica_logs``: where the logs of this broker's replicas of
  partitions awaiting an unclean recovery end (no leader, no ISR, no ELR), so the
  controller can elect the longest (KIP-966).
* RUNNING: unfenced; heartbeats go on. If the controller fences the broker anyway (its
  session expired: the process was paused, or the network cut), the state stays RUNNING,
  ``fenced`` turns true, heartbeats go on, and the controller unfences it on the next one
  that reaches it caught up. ``ready`` (the readiness probe) also wants the last heartbeat
  younger than a session and the broker's own image showing it unfenced, so a broker that
  was paused past its session is not ready on the strength of an old answer.
* PENDING_CONTROLLED_SHUTDOWN: heartbeats with ``want_shutdown`` every
  ``shutdown_heartbeat_interval_s``; the controller moves leadership away, then fences the
  broker and answers ``should_shutdown``. Gives up after ``controlled_shutdown_timeout_s``.

Failures:

* Controller failover: every request goes through ``ControllerClient``, which follows 421
  redirects to the new leader and retries during an election. A new active controller gives
  every registered broker a fresh session (KAFKA-18138), so heartbeats have 9 s to find it.
* ``STALE_BROKER_EPOCH`` / ``BROKER_ID_NOT_REGISTERED`` on a heartbeat: the registration we
  hold is gone (replaced or unregistered); register again (same incarnation: it is still
  this process) and go back to RECOVERY.
* A restarted broker is a new incarnation: it registers anew and gets a new epoch.

Not the place for: following the metadata log (``broker.metadata_follower``).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from broker.metadata_follower import MetadataFollower
from common.waits import join_task, wait_event
from metalog.client import ControllerClient, ControllerUnavailableError
from metalog.commands import BrokerHeartbeat, RegisterBroker, ReplicaLogInfo
from metalog.errors import (
    BrokerIdNotRegisteredError,
    DuplicateBrokerRegistrationError,
    MetadataError,
    StaleBrokerEpochError,
)
from metalog.records import BrokerEpoch, BrokerId, Endpoint
from metalog.responses import BrokerHeartbeatResponse

log = logging.getLogger(__name__)


class BrokerState(enum.Enum):
    NOT_RUNNING = "NOT_RUNNING"
    STARTING = "STARTING"
    RECOVERY = "RECOVERY"
    RUNNING = "RUNNING"
    PENDING_CONTROLLED_SHUTDOWN = "PENDING_CONTROLLED_SHUTDOWN"
    SHUTTING_DOWN = "SHUTTING_DOWN"


@dataclass(frozen=True)
class LifecycleConfig:
    broker_id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    heartbeat_interval_s: float = 2.0
    """KRaft ``broker.heartbeat.interval.ms``."""
    session_timeout_s: float = 9.0
    """KRaft ``broker.session.timeout.ms`` (the controller's): a heartbeat older than this
    no longer proves we are unfenced."""
    shutdown_heartbeat_interval_s: float = 0.5
    controlled_shutdown_timeout_s: float = 30.0
    request_timeout_s: float = 4.0
    """Budget of one registration or heartbeat attempt, redirects and retries included."""


class _Reregister(Exception):
    """The controller no longer knows our registration: register again."""


class BrokerLifecycle:
    """See the module docstring. ``start()``, then ``shutdown()`` (controlled) or ``stop()``."""

    def __init__(
        self,
        config: LifecycleConfig,
        controller_urls: Sequence[str],
        follower: MetadataFollower,
        *,
        previous_broker_epoch: int | None = None,
        replica_logs: Callable[[], tuple[ReplicaLogInfo, ...]] | None = None,
        incarnation_id: str | None = None,
        previous_incarnation_id: str | None = None,
    ) -> None:
        self.config = config
        self.follower = follower
        self.previous_broker_epoch = previous_broker_epoch
        """The epoch the clean-shutdown marker named at start (None: there was none)."""
        self._replica_logs = replica_logs
        self._reported: set[tuple[str, int, int]] = set()  # logged once per partition epoch
        self._client = ControllerClient(controller_urls, timeout_s=config.request_timeout_s)
        self.incarnation_id = incarnation_id or uuid.uuid4().hex
        self.previous_incarnation_id = previous_incarnation_id
        """The incarnation that held the data directory before this process locked it
        (``broker.clean_shutdown.claim_data_dir``): proven dead, not waited out."""
        self.state = BrokerState.NOT_RUNNING
        self.broker_epoch: BrokerEpoch | None = None
        self.fenced = True
        self.registrations = 0
        self.last_heartbeat: BrokerHeartbeatResponse | None = None
        self.last_heartbeat_monotonic_s: float | None = None
        self.shutdown_clean: bool | None = None
        """After a controlled shutdown: whether the controller answered should_shutdown."""
        self._shutdown_requested = asyncio.Event()
        self._wake = asyncio.Event()
        self._done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ API

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The registration and heartbeat loop, once started (watched: ``common.essential``)."""
        return self._task

    async def start(self) -> None:
        self._set_state(BrokerState.STARTING)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="broker-lifecycle")

    async def shutdown(self) -> None:
        """Controlled shutdown (SIGTERM): returns once SHUTTING_DOWN."""
        if self._task is None:
            return
        self._shutdown_requested.set()
        self._wake.set()
        await self._done.wait()

    async def stop(self) -> None:
        """Stop at once (no controlled shutdown)."""
        if self._task is not None:
            await join_task(self._task, cancel=True)
            self._task = None
        await self._client.close()
        self._set_state(BrokerState.NOT_RUNNING)

    @property
    def ready(self) -> bool:
        """RUNNING, unfenced and caught up with the committed metadata.

        Unfenced means: the last heartbeat said so, that heartbeat is younger than a session
        (after a pause longer than that, the controller has fenced us whatever we last
        heard), and our own image shows our registration unfenced.
        """
        hb = self.last_heartbeat_monotonic_s
        return (
            self.state is BrokerState.RUNNING
            and not self.fenced
            and hb is not None
            and time.monotonic() - hb < self.config.session_timeout_s
            and self.follower.caught_up
            and self.registered_unfenced_in_image()
        )

    def registered_unfenced_in_image(self) -> bool:
        reg = self.follower.image.brokers.brokers.get(BrokerId(self.config.broker_id))
        return reg is not None and reg.broker_epoch == self.broker_epoch and not reg.fenced

    def describe(self) -> dict[str, object]:
        hb = self.last_heartbeat_monotonic_s
        return {
            "broker_id": self.config.broker_id,
            "state": self.state.value,
            "broker_epoch": self.broker_epoch,
            "incarnation_id": self.incarnation_id,
            "fenced": self.fenced,
            "ready": self.ready,
            "registrations": self.registrations,
            "metadata_offset": self.follower.offset,
            "controller_metadata_offset": self.follower.high_watermark,
            "caught_up": self.follower.caught_up,
            "last_heartbeat_ms_ago": (
                None if hb is None else round((time.monotonic() - hb) * 1000, 1)
            ),
        }

    # ------------------------------------------------------------------ loop

    def _set_state(self, state: BrokerState) -> None:
        if state is not self.state:
            log.info("broker %d: %s -> %s", self.config.broker_id, self.state.value, state.value)
            self.state = state

    async def _run(self) -> None:
        try:
            while not self._shutdown_requested.is_set():
                if not await self._register():
                    break  # shutdown requested before we were registered
                try:
                    await self._heartbeat_until_shutdown()
                except _Reregister as e:
                    log.warning("broker %d: %s; registering again", self.config.broker_id, e)
                    self.fenced = True
                    self._set_state(BrokerState.RECOVERY)
                    continue
                await self._controlled_shutdown()
                break
        finally:
            if self.state is not BrokerState.NOT_RUNNING:
                self._set_state(BrokerState.SHUTTING_DOWN)
            self._done.set()

    async def _register(self) -> bool:
        cfg = self.config
        # Registering again in the same process: our logs lost nothing, and the epoch we held
        # says so (the controller also knows us by the incarnation id).
        previous = (
            self.broker_epoch if self.broker_epoch is not None else (self.previous_broker_epoch)
        )
        cmd = RegisterBroker(
            broker_id=BrokerId(cfg.broker_id),
            incarnation_id=self.incarnation_id,
            endpoints=cfg.endpoints,
            rack=cfg.rack,
            previous_broker_epoch=BrokerEpoch(-1 if previous is None else previous),
            previous_incarnation_id=self.previous_incarnation_id,
        )
        attempt = 0
        while not self._shutdown_requested.is_set():
            attempt += 1
            try:
                resp = await self._client.execute(cmd)
            except DuplicateBrokerRegistrationError as e:
                log.info("broker %d: %s; retrying", cfg.broker_id, e)
            except (MetadataError, ControllerUnavailableError) as e:
                if attempt == 1 or attempt % 10 == 0:
                    log.warning(
                        "broker %d: registration attempt %d failed: %s", cfg.broker_id, attempt, e
                    )
            else:
                self.broker_epoch = resp.broker_epoch
                self.registrations += 1
                self.fenced = True
                log.info(
                    "broker %d: registered with epoch %d (incarnation %s)",
                    cfg.broker_id,
                    resp.broker_epoch,
                    self.incarnation_id,
                )
                if self.state is BrokerState.STARTING:
                    self._set_state(BrokerState.RECOVERY)
                return True
            await self._sleep(min(0.2 * attempt, cfg.heartbeat_interval_s))
        return False

    async def _sleep(self, seconds: float) -> None:
        """Sleep, cut short by ``_wake`` (shutdown, or the follower catching up)."""
        await wait_event(self._wake, seconds)
        self._wake.clear()

    async def _heartbeat_until_shutdown(self) -> None:
        epoch = self.broker_epoch
        assert epoch is not None
        catch_up = asyncio.get_running_loop().create_task(self._wake_when_caught_up(epoch))
        try:
            while not self._shutdown_requested.is_set():
                resp = await self._heartbeat(want_shutdown=False)
                if resp is not None and not resp.is_fenced and self.state is BrokerState.RECOVERY:
                    self._set_state(BrokerState.RUNNING)
                await self._sleep(self.config.heartbeat_interval_s)
        finally:
            catch_up.cancel()

    async def _wake_when_caught_up(self, epoch: int) -> None:
        await self.follower.wait_for_offset(epoch)
        self._wake.set()

    async def _heartbeat(self, *, want_shutdown: bool) -> BrokerHeartbeatResponse | None:
        epoch = self.broker_epoch
        assert epoch is not None
        reports = self._replica_logs() if self._replica_logs is not None else ()
        for r in reports:
            key = (r.topic_id, r.partition, r.partition_epoch)
            if key not in self._reported:
                log.info(
                    "broker %d: %s-%d awaits an unclean recovery; reporting its log end "
                    "(leader epoch %d, offset %d)",
                    self.config.broker_id,
                    r.topic_id,
                    r.partition,
                    r.last_leader_epoch,
                    r.log_end_offset,
                )
        self._reported = {(r.topic_id, r.partition, r.partition_epoch) for r in reports}
        cmd = BrokerHeartbeat(
            broker_id=BrokerId(self.config.broker_id),
            broker_epoch=epoch,
            current_metadata_offset=self.follower.offset,
            want_shutdown=want_shutdown,
            replica_logs=reports,
        )
        try:
            resp: BrokerHeartbeatResponse = await self._client.execute(cmd)
        except (StaleBrokerEpochError, BrokerIdNotRegisteredError) as e:
            raise _Reregister(str(e)) from None
        except (MetadataError, ControllerUnavailableError) as e:
            log.info("broker %d: heartbeat failed: %s", self.config.broker_id, e)
            return None
        if resp.is_fenced != self.fenced:
            log.info(
                "broker %d: %s by the controller",
                self.config.broker_id,
                "fenced" if resp.is_fenced else "unfenced",
            )
        self.fenced = resp.is_fenced
        self.last_heartbeat = resp
        self.last_heartbeat_monotonic_s = time.monotonic()
        return resp

    async def _controlled_shutdown(self) -> None:
        self._set_state(BrokerState.PENDING_CONTROLLED_SHUTDOWN)
        deadline = time.monotonic() + self.config.controlled_shutdown_timeout_s
        self.shutdown_clean = False
        while time.monotonic() < deadline:
            try:
                resp = await self._heartbeat(want_shutdown=True)
            except _Reregister as e:
                # Our registration is gone: the controller holds nothing of ours to move.
                log.info(
                    "broker %d: %s; nothing to shut down on the controller",
                    self.config.broker_id,
                    e,
                )
                self.shutdown_clean = True
                break
            if resp is not None and resp.should_shutdown:
                self.shutdown_clean = True
                break
            await asyncio.sleep(self.config.shutdown_heartbeat_interval_s)
        if not self.shutdown_clean:
            log.warning(
                "broker %d: controlled shutdown timed out after %.0f s",
                self.config.broker_id,
                self.config.controlled_shutdown_timeout_s,
            )
        self._set_state(BrokerState.SHUTTING_DOWN)
