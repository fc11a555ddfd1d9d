// Two Apache Kafka 4.4 Java consumers in one group with the classic protocol and
// CooperativeStickyAssignor (KIP-429), for tests/integration/kafka/test_kafka_cooperative.py.
// Run as a single-file source program, not built: java -cp '<kafka jars>/*' CooperativeConsumers.java
//   <bootstrap> <topic> <group> <partitions> <records>
// The topic exists (the test creates it). This program produces the first half of the records
// (value i to partition i % partitions), starts member "a" and waits until it owns every
// partition, starts member "b" and waits until each owns half, produces the second half, and
// waits until the two together have read every record. Each member commits after every poll
// that returned records and, on a revocation, before the partitions move. One JSON line on
// stdout, prefixed "RESULT ": the times of each step (doneMs: every record read, before the
// members close, which revokes what each still owns), and per member every rebalance callback (with a time on one clock
// for both, so the test can check that no partition was owned twice at once) and every record.
// Both members run in one JVM, each on its own thread (a KafkaConsumer is single-threaded),
// so the test pays for one JVM start.

import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class CooperativeConsumers {
  static final long T0 = System.nanoTime();

  static long nowMs() {
    return (System.nanoTime() - T0) / 1_000_000;
  }

  static Set<Integer> partitions(Collection<TopicPartition> tps) {
    Set<Integer> out = new TreeSet<>();
    for (TopicPartition tp : tps) out.add(tp.partition());
    return out;
  }

  static final class Member implements Runnable, ConsumerRebalanceListener {
    final String name;
    final String topic;
    final KafkaConsumer<String, String> consumer;
    final List<Map<String, Object>> events = Collections.synchronizedList(new ArrayList<>());
    final List<Map<String, Object>> records = Collections.synchronizedList(new ArrayList<>());
    volatile Set<Integer> owned = Set.of();
    volatile boolean stop;
    volatile Throwable failed;
    final Thread thread = new Thread(this);

    Member(String name, String bootstrap, String topic, String group) {
      this.name = name;
      this.topic = topic;
      Properties p = new Properties();
      p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
      p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
      p.put(ConsumerConfig.CLIENT_ID_CONFIG, name);
      p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
      p.put(
          ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
          CooperativeStickyAssignor.class.getName());
      p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
      p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
      p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
      p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
      p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
      p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
      consumer = new KafkaConsumer<>(p);
    }

    void event(String what, Collection<TopicPartition> tps) {
      Map<String, Object> e = new LinkedHashMap<>();
      e.put("ms", nowMs());
      e.put("event", what);
      e.put("partitions", partitions(tps));
      events.add(e);
    }

    @Override
    public void onPartitionsRevoked(Collection<TopicPartition> tps) {
      event("revoked", tps);
      // What was read here is committed before the partitions move: the next owner resumes
      // there, so no record is read twice.
      if (!tps.isEmpty()) consumer.commitSync();
    }

    @Override
    public void onPartitionsAssigned(Collection<TopicPartition> tps) {
      event("assigned", tps);
    }

    @Override
    public void onPartitionsLost(Collection<TopicPartition> tps) {
      event("lost", tps);
    }

    @Override
    public void run() {
      try {
        consumer.subscribe(List.of(topic), this);
        while (!stop) {
          ConsumerRecords<String, String> recs = consumer.poll(Duration.ofMillis(100));
          for (ConsumerRecord<String, String> r : recs) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("partition", r.partition());
            m.put("offset", r.offset());
            m.put("value", Integer.parseInt(r.value()));
            records.add(m);
          }
          if (!recs.isEmpty()) consumer.commitSync();
          owned = partitions(consumer.assignment());
        }
        consumer.commitSync();
      } catch (Throwable t) {
        failed = t;
      } finally {
        consumer.close(CloseOptions.timeout(Duration.ofSeconds(10)));
      }
    }

    Set<Integer> values() {
      Set<Integer> out = new HashSet<>();
      synchronized (records) {
        for (Map<String, Object> r : records) out.add((Integer) r.get("value"));
      }
      return out;
    }

    Map<String, Object> report() {
      Map<String, Object> m = new LinkedHashMap<>();
      m.put("events", events);
      m.put("records", records);
      m.put("failed", failed == null ? null : failed.toString());
      return m;
    }
  }

  static void produce(KafkaProducer<String, String> p, String topic, int partitions, int from, int to)
      throws Exception {
    for (int i = from; i < to; i++) p.send(new ProducerRecord<>(topic, i % partitions, null, String.valueOf(i)));
    p.flush();
  }

  static void waitFor(String what, BooleanSupplier cond, Member... members) throws Exception {
    long deadline = System.nanoTime() + 60_000_000_000L;
    while (!cond.getAsBoolean()) {
      for (Member m : members) {
        if (m.failed != null) throw new IllegalStateException(m.name + " failed", m.failed);
      }
      if (System.nanoTime() > deadline) throw new IllegalStateException("timed out: " + what);
      Thread.sleep(50);
    }
  }

  public static void main(String[] args) throws Exception {
    String bootstrap = args[0];
    String topic = args[1];
    String group = args[2];
    int partitions = Integer.parseInt(args[3]);
    int n = Integer.parseInt(args[4]);
    Set<Integer> all = new TreeSet<>();
    for (int i = 0; i < partitions; i++) all.add(i);
    Map<String, Object> out = new LinkedHashMap<>();

    Properties pp = new Properties();
    pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    pp.put(ProducerConfig.ACKS_CONFIG, "all");
    pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    Member a = new Member("a", bootstrap, topic, group);
    Member b = new Member("b", bootstrap, topic, group);
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
      produce(producer, topic, partitions, 0, n / 2);
      a.thread.start();
      waitFor("a owns every partition", () -> a.owned.equals(all), a);
      out.put("aAloneMs", nowMs());
      b.thread.start();
      waitFor(
          "a and b share the partitions",
          () -> a.owned.size() == partitions / 2 && b.owned.size() == partitions / 2,
          a,
          b);
      out.put("sharedMs", nowMs());
      out.put("aOwns", a.owned);
      out.put("bOwns", b.owned);
      produce(producer, topic, partitions, n / 2, n);
      waitFor(
          "every record read",
          () -> {
            Set<Integer> seen = a.values();
            seen.addAll(b.values());
            return seen.size() == n;
          },
          a,
          b);
      out.put("doneMs", nowMs());
    } finally {
      a.stop = true;
      b.stop = true;
      a.thread.join(30_000);
      b.thread.join(30_000);
    }
    out.put("a", a.report());
    out.put("b", b.report());
    System.out.println("RESULT " + new ObjectMapper().writeValueAsString(out));
  }
}
