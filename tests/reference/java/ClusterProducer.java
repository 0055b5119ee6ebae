// Apache Kafka's Java producer through a leader failover: an idempotent acks=all producer
// sends `count` records ("java-<i>") to `topic`, a little at a time, printing "ACKED <n>" as
// acknowledgements come in (the test kills a leader meanwhile) and "DONE <acked> <failed>".
// Usage: java -cp <kafka-clients classpath> ClusterProducer.java <bootstrap> <topic> <count>

import java.util.Properties;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class ClusterProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "90000");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        AtomicInteger acked = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, null, "java-" + i), (metadata, error) -> {
                    if (error != null) {
                        failed.incrementAndGet();
                        System.out.println("FAILED " + error);
                    } else if (acked.incrementAndGet() % 100 == 0) {
                        System.out.println("ACKED " + acked.get());
                    }
                    System.out.flush();
                });
                if (i % 100 == 99) {
                    Thread.sleep(50);
                }
            }
            producer.flush();
        }
        System.out.println("DONE " + acked.get() + " " + failed.get());
    }
}
