// Apache Kafka's Java consumer with client.rack (KIP-392): reads partition 0 of `topic` from
// its start with the given isolation level until `count` records came, printing each value
// on a line "VALUE <value>", then "DONE <count>". A leader with a replica selector sends it to
// an in-sync replica of its rack; the Python test checks on the brokers who served it.
// Usage: java -cp <kafka-clients classpath> RackConsumer.java <bootstrap> <topic> <rack>
//        <read_committed|read_uncommitted> <count>

import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class RackConsumer {
    public static void main(String[] args) {
        String bootstrap = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[4]);
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.CLIENT_RACK_CONFIG, args[2]);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, args[3]);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        int seen = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            TopicPartition partition = new TopicPartition(topic, 0);
            consumer.assign(List.of(partition));
            consumer.seekToBeginning(List.of(partition));
            long deadline = System.currentTimeMillis() + 60_000;
            while (seen < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(500))) {
                    System.out.println("VALUE " + record.value());
                    seen++;
                }
            }
        }
        System.out.println("DONE " + seen);
    }
}
