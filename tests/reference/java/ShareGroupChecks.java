// A share group (KIP-932) through Apache Kafka's own KafkaShareConsumer (kafka-clients 4.4)
// against a broker: run as a single-file program with the kafka-clients jar on the classpath
// (`java -cp ... ShareGroupChecks.java BOOTSTRAP SUFFIX`). It creates a topic of one partition,
// sets share.auto.offset.reset=earliest on a new group (IncrementalAlterConfigs on a GROUP
// resource, before producing, as Kafka's quick-start does), produces 30 records, and consumes
// them with explicit acknowledgement: offsets ending in 3 are RELEASEd on first delivery,
// offsets ending in 7 are REJECTed, everything else is ACCEPTed; every other poll's
// acknowledgements go by commitSync (ShareAcknowledge), the others ride on the next poll
// (ShareFetch). After every record is settled it polls once more for stragglers. Prints one
// JSON object per line (delivered / ack / commit / lock / stray), then "DONE"; an exception
// fails the run.
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ShareGroupChecks {
    static final int RECORDS = 30;

    static final long START = System.currentTimeMillis();

    // progress on stderr (the test shows it when the run fails)
    static void phase(String name) {
        System.err.println("phase " + name + " at " + (System.currentTimeMillis() - START) + " ms");
    }

    public static void main(String[] args) throws Exception {
        phase("start");
        String bootstrap = args[0];
        String topic = "jshare-" + args[1];
        String group = "jshare-group-" + args[1];
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(60, TimeUnit.SECONDS);
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp earliest = new AlterConfigOp(
                new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(earliest))).all().get(60, TimeUnit.SECONDS);
        }
        phase("topic and group config");
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < RECORDS; i++) {
                producer.send(new ProducerRecord<>(topic, 0, "k" + i, "v" + i)).get(60, TimeUnit.SECONDS);
            }
        }
        phase("produced");
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put("share.acknowledgement.mode", "explicit");
        c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10");
        Map<Long, String> settled = new HashMap<>();
        long deadline = System.currentTimeMillis() + 25_000;
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            int polls = 0;
            while (settled.size() < RECORDS && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(1000));
                phase("poll " + records.count());
                for (ConsumerRecord<String, String> record : records) {
                    int count = record.deliveryCount().map(Short::intValue).orElse(-1);
                    System.out.println("{\"event\": \"delivered\", \"offset\": " + record.offset()
                        + ", \"count\": " + count + ", \"key\": \"" + record.key()
                        + "\", \"value\": \"" + record.value() + "\"}");
                    AcknowledgeType type;
                    if (record.offset() % 10 == 3 && count == 1) {
                        type = AcknowledgeType.RELEASE;
                    } else if (record.offset() % 10 == 7) {
                        type = AcknowledgeType.REJECT;
                    } else {
                        type = AcknowledgeType.ACCEPT;
                    }
                    consumer.acknowledge(record, type);
                    System.out.println("{\"event\": \"ack\", \"offset\": " + record.offset()
                        + ", \"type\": \"" + type.name() + "\"}");
                    if (type != AcknowledgeType.RELEASE) {
                        settled.put(record.offset(), type.toString());
                    }
                }
                if (!records.isEmpty() && ++polls % 2 == 0) {
                    commit(consumer);
                }
            }
            commit(consumer);
            for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(1500))) {
                System.out.println("{\"event\": \"stray\", \"offset\": " + record.offset() + "}");
                consumer.acknowledge(record, AcknowledgeType.RELEASE);
            }
            Optional<Integer> lock = consumer.acquisitionLockTimeoutMs();
            System.out.println("{\"event\": \"lock\", \"ms\": " + lock.orElse(-1) + "}");
        }
        phase("closed");
        System.out.println("DONE");
    }

    static void commit(KafkaShareConsumer<String, String> consumer) {
        Map<TopicIdPartition, Optional<KafkaException>> outcome = consumer.commitSync();
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> entry : outcome.entrySet()) {
            String error = entry.getValue().map(e -> "\"" + e.getClass().getSimpleName() + "\"").orElse("null");
            System.out.println("{\"event\": \"commit\", \"partition\": " + entry.getKey().partition()
                + ", \"error\": " + error + "}");
        }
    }
}
