// KafkaJS 2.2 transactions against Longboat's Kafka listener, driven by
// tests/integration/kafka/test_kafkajs.py.
// Usage: node txn.js '{"bootstrap": "h:p,...", "in": T_IN, "out": T_OUT, "group": G,
//                      "records": N, "zombieTopic": T_Z}'
// The topics exist already (the test creates them) and T_IN holds N plain records. This run:
//  1. a transactional producer (transactionalId, idempotent, one request in flight) commits one
//     transaction to every partition of T_OUT ("c<i>") and aborts another ("a<i>");
//  2. consume-transform-produce: a read_committed consumer in group G reads T_IN, and one
//     transaction writes "t-<value>" to T_OUT and sends the consumed offsets for G
//     (AddOffsetsToTxn + TxnOffsetCommit), committed; then a transaction that sends offset 0
//     for every partition of T_IN is aborted (the group's offsets must not move);
//  3. zombie (beside 2.): a second producer of one transactionalId fences the first in
//     mid-transaction, and the first's commit fails; the second commits "fresh" to T_Z;
//  4. reads T_OUT from the beginning twice, read_committed and read_uncommitted, and T_Z
//     read_committed.
// Prints one JSON object on stdout for the test to check; KafkaJS's own log goes to stderr.
'use strict'
const { Kafka, logLevel } = require('kafkajs')

const args = JSON.parse(process.argv[2])
const { bootstrap, group: groupId, records: nRecords } = args
const tIn = args.in
const tOut = args.out

const kafka = new Kafka({
  clientId: 'longboat-kafkajs-txn-test',
  brokers: bootstrap.split(','),
  logLevel: logLevel.WARN,
  logCreator: () => ({ level, log }) => process.stderr.write(JSON.stringify({ level, ...log }) + '\n'),
  retry: { retries: 8, initialRetryTime: 200 },
})

async function withTimeout (what, ms, promise) {
  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer in ${ms} ms`)), ms)
  })
  try {
    return await Promise.race([promise, timeout])
  } finally {
    clearTimeout(timer)
  }
}

// The client's bounded retries (above) hold for these producers too, so a failure shows in the
// test instead of being retried for ever; KafkaJS warns on stderr that an idempotent producer
// should retry without limit.
function txnProducer (transactionalId) {
  return kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1, transactionTimeout: 30000 })
}

// A short fetch wait: stop() and disconnect() wait for the fetch under way.
const consumerTimes = { sessionTimeout: 10000, heartbeatInterval: 1000, maxWaitTimeInMs: 500 }

// Every record of `topic` from the beginning, as a new group with the given isolation, until
// `want` of them are in; the test then checks that nothing else arrived.
async function readAll (topic, want, readUncommitted) {
  const consumer = kafka.consumer({
    groupId: `js-reader-${readUncommitted ? 'ru' : 'rc'}-${topic}-${Date.now()}`,
    readUncommitted,
    ...consumerTimes,
  })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  const got = []
  await withTimeout(`read ${topic}`, 60000, new Promise((resolve, reject) => {
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        got.push({ partition, offset: message.offset, value: message.value.toString() })
        if (got.length >= want) resolve()
      },
    }).catch(reject)
  }))
  // An aborted record would sit before the last wanted one in some partition (each partition's
  // last transaction committed), so once `want` are in, a stray one has arrived too; linger a
  // little for anything past them.
  await new Promise((resolve) => setTimeout(resolve, 1000))
  await consumer.disconnect()
  return got
}

async function main () {
  const t0 = Date.now()
  const out = { elapsedMs: {} }
  const mark = (what) => { out.elapsedMs[what] = Date.now() - t0 }
  const admin = kafka.admin()
  await admin.connect()
  const outPartitions = (await admin.fetchTopicMetadata({ topics: [tOut] })).topics[0].partitions.length

  // 1. One committed and one aborted transaction over every partition of T_OUT.
  const producer = txnProducer('js-txn')
  await producer.connect()
  const committed = await producer.transaction()
  const perPartition = []
  for (let i = 0; i < 2 * outPartitions; i++) perPartition.push({ partition: i % outPartitions, value: `c${i}` })
  out.committedSend = await committed.send({ topic: tOut, messages: perPartition })
  await committed.commit()
  const aborted = await producer.transaction()
  await aborted.send({
    topic: tOut,
    messages: perPartition.map((m) => ({ partition: m.partition, value: m.value.replace('c', 'a') })),
  })
  await aborted.abort()

  mark('1-committed-and-aborted')

  // 2. Consume-transform-produce, exactly once: the outputs and the group's offsets commit
  // together. Beside it (another transactional id, another topic), 3. a zombie: the second
  // producer's InitProducerId bumps the epoch and aborts the first's open transaction; the
  // first's EndTxn is then refused with Kafka's fencing error. Concurrent because each waits
  // mostly on a group join or a coordinator's abort, not on the other.
  let inputs
  const consumeTransformProduce = async () => {
    const consumer = kafka.consumer({ groupId, readUncommitted: false, ...consumerTimes })
    await consumer.connect()
    await consumer.subscribe({ topics: [tIn], fromBeginning: true })
    inputs = []
    await withTimeout('consume the input', 60000, new Promise((resolve, reject) => {
      consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          inputs.push({ partition, offset: Number(message.offset), value: message.value.toString() })
          if (inputs.length >= nRecords) resolve()
        },
      }).catch(reject)
    }))
    await consumer.stop()
    const next = {}
    for (const r of inputs) next[r.partition] = Math.max(next[r.partition] ?? 0, r.offset + 1)
    const eos = await producer.transaction()
    await eos.send({
      topic: tOut,
      messages: inputs.map((r) => ({ partition: r.offset % outPartitions, value: `t-${r.value}` })),
    })
    await eos.sendOffsets({
      consumerGroupId: groupId,
      topics: [{ topic: tIn, partitions: Object.entries(next).map(([p, o]) => ({ partition: Number(p), offset: String(o) })) }],
    })
    await eos.commit()
    out.sentOffsets = next
    // The same again, aborted: the offsets sent in it (0 everywhere) must never count.
    const rewind = await producer.transaction()
    await rewind.sendOffsets({
      consumerGroupId: groupId,
      topics: [{ topic: tIn, partitions: Object.keys(next).map((p) => ({ partition: Number(p), offset: '0' })) }],
    })
    await rewind.abort()
    await consumer.disconnect() // autoCommit off: commits nothing of its own
    out.groupOffsets = (await admin.fetchOffsets({ groupId, topics: [tIn] }))[0].partitions
      .map((p) => ({ partition: p.partition, offset: Number(p.offset) }))
      .sort((a, b) => a.partition - b.partition)
  }
  const zombieAndSuccessor = async () => {
    const zombie = txnProducer('js-zombie')
    await zombie.connect()
    const zt = await zombie.transaction()
    await zt.send({ topic: args.zombieTopic, messages: [{ partition: 0, value: 'zombie' }] })
    const successor = txnProducer('js-zombie')
    await successor.connect()
    // KafkaJS sends the transactional InitProducerId with the first transaction(), not at
    // connect() (which gets a plain idempotent producer id).
    const st = await withTimeout('the successor begins', 60000, successor.transaction())
    try {
      await zt.commit()
      out.zombieCommit = { ok: true }
    } catch (e) {
      out.zombieCommit = { ok: false, name: e.name, type: e.type, code: e.code, message: e.message }
    }
    await st.send({ topic: args.zombieTopic, messages: [{ partition: 0, value: 'fresh' }] })
    await st.commit()
    await successor.disconnect()
    await zombie.disconnect().catch(() => {})
  }
  await Promise.all([consumeTransformProduce(), zombieAndSuccessor()])
  mark('2-consume-transform-produce-and-3-zombie')

  // 4. What each isolation level sees of T_OUT, and read_committed of T_Z (concurrent: each
  // reader is a new group, whose join waits out the coordinator's initial rebalance delay).
  const wantCommitted = perPartition.length + inputs.length
  ;[out.readCommitted, out.readUncommitted, out.zombieTopic] = await Promise.all([
    readAll(tOut, wantCommitted, false),
    readAll(tOut, wantCommitted + perPartition.length, true),
    readAll(args.zombieTopic, 1, false),
  ])
  mark('4-read')
  await producer.disconnect()
  await admin.disconnect()
  process.stdout.write(JSON.stringify(out) + '\n')
}

main().then(() => process.exit(0), (e) => {
  process.stderr.write(`kafkajs txn run failed: ${e.stack || e}\n`)
  process.exit(1)
})
