// A Kafka Streams application with processing.guarantee=exactly_once_v2, run as a single-file
// program (`java -cp ... StreamsApp.java BOOTSTRAP STATE_DIR`). Two topologies in one app:
//   stateless: streams-in → mapValues(upper case) → streams-upper
//   stateful:  streams-in → groupByKey().count() (a RocksDB store with a compacted changelog)
//              → streams-counts
// It runs until killed; each record is slowed a little so that a SIGKILL lands mid-run.
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;

public class StreamsApp {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, "lockgate-eos");
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, args[1]);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 6000);
        p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1000);
        p.put(StreamsConfig.producerPrefix("transaction.timeout.ms"), 10000);

        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> in = builder.stream("streams-in", Consumed.with(Serdes.String(), Serdes.String()));
        in.mapValues(v -> {
            try {
                Thread.sleep(2);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return v.toUpperCase();
        }).to("streams-upper", Produced.with(Serdes.String(), Serdes.String()));
        in.groupByKey().count().toStream()
            .to("streams-counts", Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(10));
            stopped.countDown();
        }));
        streams.setStateListener((now, before) -> System.out.println("STATE " + now));
        streams.start();
        stopped.await();
    }
}
