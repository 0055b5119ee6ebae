// Apache Kafka's Java client on a topic whose history is mostly in tiered storage: first the
// Admin's ListOffsets of every partition for each OffsetSpec (earliest, latest, and KIP-405's
// earliestLocal / latestTiered / earliestPendingUpload, and forTimestamp(0) as timestamp0), one
// line each,
// "OFFSET <spec> <partition> <offset> <leader epoch or ->"; then, for each isolation level, a
// KafkaConsumer reads every partition from its beginning until its position reaches the end
// offset, one line per record, "RECORD <isolation> <partition> <offset> <key> <value>
// <headers>": key and value as hex behind "0x" or "null", headers as name=hex joined by
// commas or "-"; then "DONE". Bytes are printed as they came (byte-array deserializers).
// Usage: java -cp <kafka-clients classpath> TieredReader <bootstrap> <topic> <partitions>

import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class TieredReader {
    private static final HexFormat HEX = HexFormat.of();

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        List<TopicPartition> partitions = new ArrayList<>();
        for (int p = 0; p < count; p++) {
            partitions.add(new TopicPartition(topic, p));
        }
        listOffsets(bootstrap, partitions);
        for (String isolation : List.of("read_uncommitted", "read_committed")) {
            consume(bootstrap, partitions, isolation);
        }
        System.out.println("DONE");
    }

    static void listOffsets(String bootstrap, List<TopicPartition> partitions) throws Exception {
        Map<String, OffsetSpec> specs = new LinkedHashMap<>();
        specs.put("earliest", OffsetSpec.earliest());
        specs.put("latest", OffsetSpec.latest());
        specs.put("earliestLocal", OffsetSpec.earliestLocal());
        specs.put("latestTiered", OffsetSpec.latestTiered());
        specs.put("earliestPendingUpload", OffsetSpec.earliestPendingUpload());
        specs.put("timestamp0", OffsetSpec.forTimestamp(0));
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            for (Map.Entry<String, OffsetSpec> spec : specs.entrySet()) {
                Map<TopicPartition, OffsetSpec> query = new LinkedHashMap<>();
                for (TopicPartition partition : partitions) {
                    query.put(partition, spec.getValue());
                }
                Map<TopicPartition, ListOffsetsResultInfo> found = admin.listOffsets(query).all().get();
                for (TopicPartition partition : partitions) {
                    ListOffsetsResultInfo info = found.get(partition);
                    String epoch = info.leaderEpoch().map(String::valueOf).orElse("-");
                    System.out.println("OFFSET " + spec.getKey() + " " + partition.partition() + " "
                            + info.offset() + " " + epoch);
                }
            }
        }
    }

    static void consume(String bootstrap, List<TopicPartition> partitions, String isolation) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions);
            long deadline = System.currentTimeMillis() + 60_000;
            while (!reached(consumer, ends) && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(500))) {
                    System.out.println("RECORD " + isolation + " " + record.partition() + " "
                            + record.offset() + " " + bytes(record.key()) + " " + bytes(record.value())
                            + " " + headers(record));
                }
            }
        }
    }

    static boolean reached(KafkaConsumer<byte[], byte[]> consumer, Map<TopicPartition, Long> ends) {
        for (Map.Entry<TopicPartition, Long> end : ends.entrySet()) {
            if (consumer.position(end.getKey()) < end.getValue()) {
                return false;
            }
        }
        return true;
    }

    static String bytes(byte[] data) {
        return data == null ? "null" : "0x" + HEX.formatHex(data);
    }

    static String headers(ConsumerRecord<byte[], byte[]> record) {
        List<String> out = new ArrayList<>();
        for (Header header : record.headers()) {
            out.add(header.key() + "=" + (header.value() == null ? "null" : HEX.formatHex(header.value())));
        }
        return out.isEmpty() ? "-" : String.join(",", out);
    }
}
