// KafkaJS 2.2 against Longboat's Kafka listener, driven by tests/integration/kafka/test_kafkajs.py.
// Usage: node run.js '{"bootstrap": "h:p,...", "topic": T, "group": G, "produce": N,
//                      "consumeTopics": [T, ...], "consume": M}'
// Creates T (3 partitions, RF 3) through the admin client, produces N records to it (acks all,
// idempotent, gzip every other batch), consumes M records from the beginning of consumeTopics
// in group G (KafkaJS's own group protocol client), commits, then asks the admin client about
// the topic and the group. Prints one JSON object on stdout for the test to check; KafkaJS's
// own log goes to stderr.
'use strict'
const { Kafka, CompressionTypes, logLevel } = require('kafkajs')

const args = JSON.parse(process.argv[2])
const { bootstrap, topic, group: groupId, produce: nProduce, consume: nConsume } = args

const kafka = new Kafka({
  clientId: 'longboat-kafkajs-test',
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

async function main () {
  const out = {}
  const admin = kafka.admin()
  await admin.connect()
  out.created = await admin.createTopics({
    topics: [{ topic, numPartitions: 3, replicationFactor: 3, configEntries: [{ name: 'retention.ms', value: '-1' }] }],
    waitForLeaders: true,
  })
  out.topics = (await admin.listTopics()).filter((t) => t === topic)
  const md = await admin.fetchTopicMetadata({ topics: [topic] })
  out.metadata = md.topics.map((t) => ({
    name: t.name,
    partitions: t.partitions.map((p) => ({ id: p.partitionId, leader: p.leader, replicas: p.replicas.length })).sort((a, b) => a.id - b.id),
  }))
  out.cluster = await admin.describeCluster()

  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  out.produced = []
  const ts0 = 1700000000000
  for (let batch = 0; batch * 10 < nProduce; batch++) {
    const messages = []
    for (let i = batch * 10; i < Math.min(nProduce, (batch + 1) * 10); i++) {
      messages.push({
        key: `js-${i % 5}`,
        value: `kafkajs value ${i}`,
        headers: { i: String(i), origin: 'kafkajs' },
        timestamp: String(ts0 + i),
      })
    }
    const meta = await producer.send({
      topic,
      acks: -1,
      compression: batch % 2 ? CompressionTypes.GZIP : CompressionTypes.None,
      messages,
    })
    out.produced.push(...meta.map((m) => ({ partition: m.partition, baseOffset: m.baseOffset, errorCode: m.errorCode })))
  }
  await producer.disconnect()

  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 1000 })
  await consumer.connect()
  await consumer.subscribe({ topics: args.consumeTopics, fromBeginning: true })
  const consumed = []
  await withTimeout('consume', 60000, new Promise((resolve, reject) => {
    consumer.run({
      autoCommit: true,
      eachMessage: async ({ topic, partition, message }) => {
        consumed.push({
          topic,
          partition,
          offset: message.offset,
          key: message.key && message.key.toString(),
          value: message.value && message.value.toString(),
          timestamp: message.timestamp,
          headers: Object.fromEntries(Object.entries(message.headers || {}).map(([k, v]) => [k, v && v.toString()])),
        })
        if (consumed.length >= nConsume) resolve()
      },
    }).catch(reject)
  }))
  // KafkaJS commits on disconnect (autoCommit) what eachMessage resolved.
  await consumer.disconnect()
  out.consumed = consumed

  out.topicOffsets = (await admin.fetchTopicOffsets(topic)).sort((a, b) => a.partition - b.partition)
  out.groupOffsets = (await admin.fetchOffsets({ groupId, topics: [topic] }))[0].partitions.sort((a, b) => a.partition - b.partition)
  out.groups = (await admin.listGroups()).groups.filter((g) => g.groupId === groupId)
  out.describedGroups = (await admin.describeGroups([groupId])).groups.map((g) => ({
    groupId: g.groupId, state: g.state, protocolType: g.protocolType, members: g.members.length, errorCode: g.errorCode,
  }))
  out.configs = (await admin.describeConfigs({
    resources: [{ type: 2, name: topic, configNames: ['retention.ms'] }],
    includeSynonyms: false,
  })).resources.map((r) => ({ errorCode: r.errorCode, configs: r.configEntries.map((c) => [c.configName, c.configValue]) }))
  await admin.disconnect()
  process.stdout.write(JSON.stringify(out) + '\n')
}

main().then(() => process.exit(0), (e) => {
  process.stderr.write(`kafkajs run failed: ${e.stack || e}\n`)
  process.exit(1)
})
