// Apache Kafka's Java client against a broker: run as a single-file program with the
// kafka-clients jar on the classpath (`java -cp ... ClientChecks.java BOOTSTRAP`). Each check
// prints "RESULT <check> <name> <value>" lines that the Python test compares between lockgate
// and Apache Kafka; an exception fails the run.
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.AbortTransactionSpec;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ClientChecks {
    static String bootstrap;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            admin.createTopics(List.of(
                new NewTopic("j-idem", 2, (short) 1),
                new NewTopic("j-txn", 1, (short) 1),
                new NewTopic("j-in", 1, (short) 1),
                new NewTopic("j-out", 1, (short) 1),
                new NewTopic("j-coop", 4, (short) 1),
                new NewTopic("j-hang", 1, (short) 1))).all().get(60, TimeUnit.SECONDS);
            idempotent();
            transactions();
            consumeTransformProduce();
            cooperative();
            admin(admin);
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
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        if (transactionalId != null) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        }
        return p;
    }

    static KafkaConsumer<String, String> consumer(String group, String isolation, String assignor) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        if (assignor != null) {
            p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignor);
        }
        return new KafkaConsumer<>(p);
    }

    /** Every record of the topic's partitions from the beginning, up to `expected` of them. */
    static List<ConsumerRecord<String, String>> readAll(String topic, int partitions, String isolation, int expected) {
        List<ConsumerRecord<String, String>> found = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer(null, isolation, null)) {
            List<TopicPartition> assigned = new ArrayList<>();
            for (int i = 0; i < partitions; i++) {
                assigned.add(new TopicPartition(topic, i));
            }
            c.assign(assigned);
            c.seekToBeginning(assigned);
            long deadline = System.currentTimeMillis() + 30_000;
            while (found.size() < expected && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    found.add(r);
                }
            }
            // a little longer: nothing more may come
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                found.add(r);
            }
        }
        return found;
    }

    static void idempotent() throws Exception {
        try (KafkaProducer<String, String> p = new KafkaProducer<>(producerConfig(null))) {
            for (int i = 0; i < 500; i++) {
                p.send(new ProducerRecord<>("j-idem", i % 2, "k" + i, "v" + i));
            }
            p.flush();
        }
        List<ConsumerRecord<String, String>> read = readAll("j-idem", 2, "read_uncommitted", 500);
        Set<String> values = new HashSet<>();
        Map<Integer, Integer> last = new HashMap<>();
        boolean ordered = true;
        for (ConsumerRecord<String, String> r : read) {
            values.add(r.value());
            int n = Integer.parseInt(r.value().substring(1));
            if (last.getOrDefault(r.partition(), -1) >= n) {
                ordered = false;
            }
            last.put(r.partition(), n);
        }
        result("idempotent", "records", read.size());
        result("idempotent", "distinct", values.size());
        result("idempotent", "ordered", ordered);
    }

    static void transactions() throws Exception {
        try (KafkaProducer<String, String> p = new KafkaProducer<>(producerConfig("java-txn"))) {
            p.initTransactions();
            for (int round = 0; round < 3; round++) {
                p.beginTransaction();
                for (int i = 0; i < 10; i++) {
                    p.send(new ProducerRecord<>("j-txn", 0, "k", "round" + round + "-" + i));
                }
                if (round == 1) {
                    p.flush(); // on the log before the abort (unsent records would just be dropped)
                    p.abortTransaction();
                } else {
                    p.commitTransaction();
                }
            }
        }
        result("transactions", "read_committed", readAll("j-txn", 1, "read_committed", 20).size());
        result("transactions", "read_uncommitted", readAll("j-txn", 1, "read_uncommitted", 30).size());
    }

    static void consumeTransformProduce() throws Exception {
        try (KafkaProducer<String, String> p = new KafkaProducer<>(producerConfig("java-in"))) {
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < 10; i++) {
                p.send(new ProducerRecord<>("j-in", 0, "k" + i, "in" + i));
            }
            p.commitTransaction();
        }
        try (KafkaConsumer<String, String> c = consumer("java-eos", "read_committed", null);
             KafkaProducer<String, String> p = new KafkaProducer<>(producerConfig("java-eos"))) {
            p.initTransactions();
            c.subscribe(List.of("j-in"));
            int moved = 0;
            long deadline = System.currentTimeMillis() + 60_000;
            while (moved < 10 && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : records) {
                    p.send(new ProducerRecord<>("j-out", 0, r.key(), r.value().toUpperCase()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    moved++;
                }
                p.sendOffsetsToTransaction(offsets, c.groupMetadata());
                p.commitTransaction();
            }
        }
        result("eos", "output", readAll("j-out", 1, "read_committed", 10).size());
    }

    static void cooperative() throws Exception {
        String assignor = CooperativeStickyAssignor.class.getName();
        try (KafkaConsumer<String, String> a = consumer("java-coop", "read_uncommitted", assignor);
             KafkaConsumer<String, String> b = consumer("java-coop", "read_uncommitted", assignor)) {
            a.subscribe(List.of("j-coop"));
            b.subscribe(List.of("j-coop"));
            long deadline = System.currentTimeMillis() + 60_000;
            while (System.currentTimeMillis() < deadline
                    && !(a.assignment().size() == 2 && b.assignment().size() == 2)) {
                a.poll(Duration.ofMillis(100));
                b.poll(Duration.ofMillis(100));
            }
            result("cooperative", "assignment", a.assignment().size() + "+" + b.assignment().size());
        }
    }

    static void admin(Admin admin) throws Exception {
        result("admin", "nodes", admin.describeCluster().nodes().get(30, TimeUnit.SECONDS).size());
        result("admin", "topic_listed", admin.listTopics().names().get(30, TimeUnit.SECONDS).contains("j-idem"));
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, "j-idem");
        Config config = admin.describeConfigs(List.of(resource)).all().get(30, TimeUnit.SECONDS).get(resource);
        result("admin", "cleanup_policy", config.get("cleanup.policy").value());

        Map<String, String> states = new TreeMap<>();
        for (TransactionListing t : admin.listTransactions().all().get(30, TimeUnit.SECONDS)) {
            if (t.transactionalId().startsWith("java-")) { // the broker may serve other tests
                states.put(t.transactionalId(), t.state().toString());
            }
        }
        result("admin", "transactions", states);
        TransactionDescription txn = admin.describeTransactions(List.of("java-txn"))
            .all().get(30, TimeUnit.SECONDS).get("java-txn");
        result("admin", "java_txn_state", txn.state());

        // a transaction left open: listed by duration, described, then aborted by the admin
        KafkaProducer<String, String> hanging = new KafkaProducer<>(producerConfig("java-hang"));
        hanging.initTransactions();
        hanging.beginTransaction();
        hanging.send(new ProducerRecord<>("j-hang", 0, "k", "open")).get();
        Thread.sleep(1_500);
        Collection<TransactionListing> old = admin.listTransactions(new ListTransactionsOptions().filterOnDuration(1_000))
            .all().get(30, TimeUnit.SECONDS);
        List<String> oldIds = new ArrayList<>();
        for (TransactionListing t : old) {
            if (t.transactionalId().startsWith("java-")) {
                oldIds.add(t.transactionalId());
            }
        }
        result("admin", "running_over_1s", oldIds);
        TopicPartition hangPartition = new TopicPartition("j-hang", 0);
        List<ProducerState> producers = admin.describeProducers(List.of(hangPartition))
            .partitionResult(hangPartition).get(30, TimeUnit.SECONDS).activeProducers();
        ProducerState open = producers.get(0);
        result("admin", "open_txn_start", open.currentTransactionStartOffset().orElse(-1L));
        admin.abortTransaction(new AbortTransactionSpec(hangPartition, open.producerId(),
            (short) open.producerEpoch(), open.coordinatorEpoch().orElse(0))).all().get(30, TimeUnit.SECONDS);
        ProducerState after = admin.describeProducers(List.of(hangPartition))
            .partitionResult(hangPartition).get(30, TimeUnit.SECONDS).activeProducers().get(0);
        result("admin", "after_abort_txn_start", after.currentTransactionStartOffset().orElse(-1L));
        admin.fenceProducers(List.of("java-hang")).all().get(30, TimeUnit.SECONDS);
        TransactionDescription fenced = admin.describeTransactions(List.of("java-hang"))
            .all().get(30, TimeUnit.SECONDS).get("java-hang");
        result("admin", "fenced_state", fenced.state());
        hanging.close(Duration.ofSeconds(5));

        Map<TopicPartition, OffsetAndMetadata> offsets = admin.listConsumerGroupOffsets("java-eos")
            .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
        result("admin", "eos_group_offset", offsets.get(new TopicPartition("j-in", 0)).offset());
    }
}
