"""MetadataDelta against a dict model: random record sequences, applied in random-sized
deltas, give the image the model predicts; base images are never changed; snapshots rebuild
equal images; PMap behaves like a dict."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from metalog.delta import MetadataDelta, decode_snapshot, encode_snapshot
from metalog.image import DELETE, MetadataImage, PMap
from metalog.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

BROKERS = [0, 1, 2, 3]
NAMES = ["a", "b", "c.d", "e"]


class Model:
    """The metadata as plain dicts, changed by the obvious rules."""

    def __init__(self) -> None:
        self.topics: dict[str, dict[str, Any]] = {}  # id -> {name, parts: {p: dict}}
        self.brokers: dict[int, dict[str, Any]] = {}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        self.next_pid = 0
        self.features: dict[str, int] = {}
        self.ids = 0

    def name_taken(self, name: str) -> bool:
        return any(t["name"] == name for t in self.topics.values())


@st.composite
def record_sequences(draw: st.DrawFn) -> tuple[list[MetadataRecord], Model]:
    m = Model()
    out: list[MetadataRecord] = []
    for _ in range(draw(st.integers(min_value=1, max_value=40))):
        kind = draw(
            st.sampled_from(
                [
                    "topic",
                    "part",
                    "change",
                    "remove",
                    "config",
                    "register",
                    "fence",
                    "unfence",
                    "regchange",
                    "unregister",
                    "pids",
                    "feature",
                    "noop",
                ]
            )
        )
        if kind == "topic":
            free = [n for n in NAMES if not m.name_taken(n)]
            if not free:
                continue
            m.ids += 1
            name, tid = draw(st.sampled_from(free)), f"id{m.ids}"
            m.topics[tid] = {"name": name, "parts": {}}
            out.append(TopicRecord(name=name, topic_id=tid))
        elif kind == "part" and m.topics:
            tid = draw(st.sampled_from(sorted(m.topics)))
            p = draw(st.integers(min_value=0, max_value=3))
            replicas = tuple(draw(st.permutations(BROKERS))[: draw(st.integers(1, 3))])
            isr = replicas[: draw(st.integers(1, len(replicas)))]
            leader = draw(st.sampled_from([-1, *isr]))
            m.topics[tid]["parts"][p] = {
                "replicas": replicas,
                "isr": isr,
                "leader": leader,
                "le": 0,
                "pe": 0,
            }
            out.append(
                PartitionRecord(
                    topic_id=tid, partition=p, replicas=replicas, isr=isr, leader=leader
                )
            )
        elif kind == "change":
            cands = [(t, p) for t in sorted(m.topics) for p in sorted(m.topics[t]["parts"])]
            if not cands:
                continue
            tid, p = draw(st.sampled_from(cands))
            part = m.topics[tid]["parts"][p]
            isr = part["replicas"][: draw(st.integers(1, len(part["replicas"])))]
            leader = draw(st.sampled_from([-2, -1, *isr]))
            if leader == -2 and part["leader"] not in (-1, *isr):
                leader = -1
            set_isr = draw(st.booleans()) or isr != part["isr"]
            part["isr"] = isr
            part["pe"] += 1
            if leader != -2:
                part["leader"] = leader
                part["le"] += 1
            out.append(
                PartitionChangeRecord(
                    topic_id=tid, partition=p, isr=isr if set_isr else None, leader=leader
                )
            )
        elif kind == "remove" and m.topics:
            tid = draw(st.sampled_from(sorted(m.topics)))
            name = m.topics.pop(tid)["name"]
            m.configs.pop((2, name), None)
            out.append(RemoveTopicRecord(topic_id=tid))
        elif kind == "config":
            rtype = draw(st.sampled_from([2, 4, 16]))
            rname = draw(st.sampled_from(NAMES)) if rtype == 2 else ""
            key = draw(st.sampled_from(["retention.ms", "segment.bytes", "x"]))
            value = draw(st.none() | st.sampled_from(["1", "2"]))
            kv = m.configs.setdefault((rtype, rname), {})
            if value is None:
                kv.pop(key, None)
            else:
                kv[key] = value
            if not kv:
                del m.configs[(rtype, rname)]
            out.append(
                ConfigRecord(resource_type=rtype, resource_name=rname, name=key, value=value)
            )
        elif kind == "register":
            b = draw(st.sampled_from(BROKERS))
            epoch = draw(st.integers(0, 10**6))
            m.brokers[b] = {"epoch": epoch, "fenced": True, "cs": False}
            out.append(RegisterBrokerRecord(broker_id=b, incarnation_id="i", broker_epoch=epoch))
        elif kind in ("fence", "unfence", "regchange", "unregister") and m.brokers:
            b = draw(st.sampled_from(sorted(m.brokers)))
            e = m.brokers[b]["epoch"]
            if kind == "fence":
                m.brokers[b]["fenced"] = True
                out.append(FenceBrokerRecord(broker_id=b, broker_epoch=e))
            elif kind == "unfence":
                m.brokers[b]["fenced"] = False
                out.append(UnfenceBrokerRecord(broker_id=b, broker_epoch=e))
            elif kind == "regchange":
                cs = draw(st.none() | st.booleans())
                if cs is not None:
                    m.brokers[b]["cs"] = cs
                out.append(
                    BrokerRegistrationChangeRecord(
                        broker_id=b, broker_epoch=e, in_controlled_shutdown=cs
                    )
                )
            else:
                del m.brokers[b]
                out.append(UnregisterBrokerRecord(broker_id=b, broker_epoch=e))
        elif kind == "pids":
            m.next_pid += draw(st.integers(0, 2000))
            out.append(ProducerIdsRecord(broker_id=0, broker_epoch=0, next_producer_id=m.next_pid))
        elif kind == "feature":
            name, level = draw(st.sampled_from(["f", "g"])), draw(st.integers(0, 3))
            if level:
                m.features[name] = level
            else:
                m.features.pop(name, None)
            out.append(FeatureLevelRecord(name=name, feature_level=level))
        elif kind == "noop":
            out.append(NoOpRecord())
    out.append(NoOpRecord())  # the model's final state rides on the last record
    return out, m


def assert_matches(image: MetadataImage, m: Model) -> None:
    image.check()
    assert {tid: t.name for tid, t in image.topics.by_id.items()} == {
        tid: t["name"] for tid, t in m.topics.items()
    }
    for tid, t in m.topics.items():
        got = image.topics.by_id[tid].partitions
        assert {
            p: (r.replicas, r.isr, r.leader, r.leader_epoch, r.partition_epoch)
            for p, r in got.items()
        } == {
            p: (x["replicas"], x["isr"], x["leader"], x["le"], x["pe"])
            for p, x in t["parts"].items()
        }
        assert image.topics.get(t["name"]) is image.topics.by_id[tid]
    assert {
        b: (r.broker_epoch, r.fenced, r.in_controlled_shutdown)
        for b, r in image.brokers.brokers.items()
    } == {b: (x["epoch"], x["fenced"], x["cs"]) for b, x in m.brokers.items()}
    assert {res: kv.to_dict() for res, kv in image.configs.resources.items()} == m.configs
    assert image.producer_ids.next_producer_id == m.next_pid
    assert image.features.levels.to_dict() == m.features


@settings(max_examples=150)
@given(record_sequences(), st.lists(st.integers(1, 10), min_size=1, max_size=10))
def test_delta_apply_matches_dict_model(
    seq_model: tuple[list[MetadataRecord], Model], cuts: list[int]
) -> None:
    seq, m = seq_model
    image = MetadataImage.EMPTY
    offset = 0
    i = 0
    history: list[tuple[MetadataImage, Any]] = []
    while i < len(seq):
        n = cuts[len(history) % len(cuts)]
        before = copy.deepcopy(snapshot_of(image))
        delta = MetadataDelta(image)
        for rec in seq[i : i + n]:
            delta.replay(rec, offset, epoch=1)
            offset += 1
        new = delta.apply()
        assert snapshot_of(image) == before, "apply() changed its base image"
        assert_change_sets(delta, image, new)
        history.append((image, before))
        image = new
        i += n
    assert image.offset == len(seq) - 1 and image.epoch == 1
    assert_matches(image, m)
    assert decode_snapshot(encode_snapshot(image)) == image


def assert_change_sets(delta: MetadataDelta, old: MetadataImage, new: MetadataImage) -> None:
    """What the delta says changed is what differs between the images."""
    old_ids, new_ids = set(old.topics.by_id), set(new.topics.by_id)
    assert set(delta.created_topics) == new_ids - old_ids
    assert set(delta.deleted_topics) == old_ids - new_ids
    changed = delta.changed_partitions
    for t, p, reg in new.topics.partitions():
        if old.topics.partition(t.topic_id, p) != reg:
            assert changed[(t.topic_id, p)] == reg
    for (tid, p), reg in changed.items():
        assert new.topics.partition(tid, p) == reg
    for b in BROKERS:
        local = delta.local_changes(b)
        assert {k for k, r in changed.items() if b in r.replicas and r.leader == b} == set(
            local.leaders
        )
        assert {k for k, r in changed.items() if b in r.replicas and r.leader != b} == set(
            local.followers
        )
        gone = {
            (t.topic_id, p)
            for t, p, r in old.topics.partitions()
            if b in r.replicas
            and (
                new.topics.partition(t.topic_id, p) is None
                or b not in new.topics.partition(t.topic_id, p).replicas
            )
        }  # type: ignore[union-attr]
        assert local.deletes == gone


def snapshot_of(image: MetadataImage) -> list[Any]:
    return [image.offset, *image.records()]


@given(st.lists(st.tuples(st.integers(-50, 50), st.none() | st.integers())), st.data())
def test_pmap_behaves_like_a_dict(ops: list[tuple[int, int | None]], data: st.DataObject) -> None:
    model: dict[int, int] = {}
    pm: PMap[int, int] = PMap()
    olds: list[tuple[PMap[int, int], dict[int, int]]] = []
    for k, v in ops:
        olds.append((pm, dict(model)))
        if v is None:
            model.pop(k, None)
            pm = pm.update({k: DELETE})
        else:
            model[k] = v
            pm = pm.update({k: v})
        assert len(pm) == len(model)
    assert pm.to_dict() == model
    assert pm == PMap(model)
    for k in range(-50, 51):
        assert (k in pm) == (k in model)
        assert pm.get(k) == model.get(k)
    for old, expected in olds:  # persistence: every earlier version is intact
        assert old.to_dict() == expected
