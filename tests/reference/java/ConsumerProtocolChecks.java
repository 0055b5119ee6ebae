// The consumer group protocol (KIP-848, group.protocol=consumer) through Apache Kafka's Java
// client against a broker: run as a single-file program with the kafka-clients jar on the
// classpath (`java -cp ... ConsumerProtocolChecks.java BOOTSTRAP`). Prints "RESULT <check>
// <name> <value>" lines that the Python test compares between lockgate and Apache Kafka; an
// exception fails the run.
import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ConsumerProtocolChecks {
    static String bootstrap;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            admin.createTopics(List.of(
                new NewTopic("j848-in", 4, (short) 1),
                new NewTopic("j848-out", 1, (short) 1))).all().get(60, TimeUnit.SECONDS);
            try (KafkaProducer<String, String> p = new KafkaProducer<>(producerConfig(null))) {
                for (int i = 0; i < 20; i++) {
                    p.send(new ProducerRecord<>("j848-in", i % 4, "k" + i, "v" + i));
                }
            }
            joinAndLeave(admin);
            consumeTransformProduce(admin);
        }
        System.out.println("DONE");
    }

    static void result(String check, String name, Object value) {
        System.out.println("RESULT " + check + " " + name + " " + value);
    }

    static Properties producerConfig(String transactionalId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        if (transactionalId != null) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        }
        return p;
    }

    static KafkaConsumer<String, String> consumer(String group, boolean autoCommit) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, String.valueOf(autoCommit));
        return new KafkaConsumer<>(p);
    }

    /** Two members share the topic (2+2), consume every record once between them with
     *  commits, and the survivor takes all four partitions when the other leaves. With
     *  auto-commit on, a member commits what it has read before it gives a partition up:
     *  without it, a record read but not yet committed when its partition moves is read again
     *  by the next owner (at least once, as the protocol allows; timing decides). */
    static void joinAndLeave(Admin admin) throws Exception {
        Set<String> seen = new HashSet<>();
        int records = 0;
        try (KafkaConsumer<String, String> a = consumer("java-848", true)) {
            try (KafkaConsumer<String, String> b = consumer("java-848", true)) {
                a.subscribe(List.of("j848-in"));
                b.subscribe(List.of("j848-in"));
                long deadline = System.currentTimeMillis() + 60_000;
                while (System.currentTimeMillis() < deadline
                        && !(a.assignment().size() == 2 && b.assignment().size() == 2 && seen.size() == 20)) {
                    for (KafkaConsumer<String, String> c : List.of(a, b)) {
                        ConsumerRecords<String, String> polled = c.poll(Duration.ofMillis(100));
                        for (ConsumerRecord<String, String> r : polled) {
                            seen.add(r.value());
                            records++;
                        }
                        if (!polled.isEmpty()) {
                            c.commitSync();
                        }
                    }
                }
                result("kip848", "assignment", a.assignment().size() + "+" + b.assignment().size());
                result("kip848", "consumed", records + "/" + seen.size());
                ConsumerGroupDescription described = admin.describeConsumerGroups(List.of("java-848"))
                    .all().get(30, TimeUnit.SECONDS).get("java-848");
                result("kip848", "type", described.type());
                result("kip848", "members", described.members().size());
            }
            long deadline = System.currentTimeMillis() + 60_000;
            while (System.currentTimeMillis() < deadline && a.assignment().size() < 4) {
                a.poll(Duration.ofMillis(100));
            }
            result("kip848", "after_leave", a.assignment().size());
        }
        long committed = 0;
        for (OffsetAndMetadata o : admin.listConsumerGroupOffsets("java-848")
                .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS).values()) {
            committed += o.offset();
        }
        result("kip848", "committed", committed);
    }

    /** KIP-447 with the consumer protocol: offsets committed in the transaction with the
     *  consumer's group metadata (member id and member epoch). */
    static void consumeTransformProduce(Admin admin) throws Exception {
        int moved = 0;
        try (KafkaConsumer<String, String> c = consumer("java-848-eos", false);
             KafkaProducer<String, String> p = new KafkaProducer<>(producerConfig("java-848-eos"))) {
            p.initTransactions();
            c.subscribe(List.of("j848-in"));
            long deadline = System.currentTimeMillis() + 60_000;
            while (moved < 20 && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : records) {
                    p.send(new ProducerRecord<>("j848-out", 0, r.key(), r.value().toUpperCase()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    moved++;
                }
                p.sendOffsetsToTransaction(offsets, c.groupMetadata());
                p.commitTransaction();
            }
        }
        result("kip848_eos", "moved", moved);
        // commitTransaction returns once the commit is decided; the markers that make the
        // offsets visible follow (Kafka writes them in the background), so read until they
        // are all there, within a bound
        long committed = 0;
        long deadline = System.currentTimeMillis() + 30_000;
        while (true) {
            committed = 0;
            for (OffsetAndMetadata o : admin.listConsumerGroupOffsets("java-848-eos")
                    .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS).values()) {
                committed += o == null ? 0 : o.offset();
            }
            if (committed >= moved || System.currentTimeMillis() >= deadline) {
                break;
            }
            Thread.sleep(200);
        }
        result("kip848_eos", "committed", committed);
    }
}
