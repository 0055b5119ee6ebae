// Kafka 4's AdminClient against one broker: describeTopics (DescribeTopicPartitions, paged by
// partitionSizeLimitPerResponse, with authorized operations), describeLogDirs, and a dynamic
// broker config set on the cluster-wide default resource and read back with its source. Prints
// "RESULT <name> <value>" lines and DONE; the Python test asserts on them.
import java.util.*;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;

public class AdminKafka4Checks {
    static void result(String name, Object value) {
        System.out.println("RESULT " + name.replace(".", " ") + " " + value);
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        try (Admin admin = Admin.create(props)) {
            admin.createTopics(List.of(new NewTopic("java-dtp", 5, (short) 1)))
                .all().get(30, TimeUnit.SECONDS);
            DescribeTopicsOptions options = new DescribeTopicsOptions()
                .includeAuthorizedOperations(true).partitionSizeLimitPerResponse(2);
            TopicDescription description = admin.describeTopics(List.of("java-dtp"), options)
                .allTopicNames().get(30, TimeUnit.SECONDS).get("java-dtp");
            List<String> partitions = new ArrayList<>();
            for (TopicPartitionInfo info : description.partitions()) {
                partitions.add(info.partition() + ":" + info.leader().id() + ":" + info.isr().size()
                    + ":" + info.elr().size());
            }
            result("dtp.partitions", String.join(",", partitions));
            result("dtp.operations", new TreeSet<>(description.authorizedOperations()));
            result("dtp.internal", description.isInternal());

            Map<Integer, Map<String, LogDirDescription>> dirs = admin.describeLogDirs(List.of(0))
                .allDescriptions().get(30, TimeUnit.SECONDS);
            LogDirDescription dir = dirs.get(0).values().iterator().next();
            result("logdirs.count", dirs.get(0).size());
            result("logdirs.error", dir.error() == null ? "none" : dir.error().getClass().getSimpleName());
            result("logdirs.has_dtp", dir.replicaInfos().keySet().stream()
                .filter(tp -> tp.topic().equals("java-dtp")).count());
            result("logdirs.usable_known", dir.usableBytes().isPresent() && dir.totalBytes().isPresent());

            ConfigResource cluster = new ConfigResource(ConfigResource.Type.BROKER, "");
            admin.incrementalAlterConfigs(Map.of(cluster, List.of(new AlterConfigOp(
                new ConfigEntry("log.retention.ms", "3600000"), AlterConfigOp.OpType.SET))))
                .all().get(30, TimeUnit.SECONDS);
            ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, "0");
            ConfigEntry retention = admin.describeConfigs(List.of(broker),
                    new DescribeConfigsOptions().includeSynonyms(true))
                .all().get(30, TimeUnit.SECONDS).get(broker).get("log.retention.ms");
            result("broker.retention", retention.value() + ":" + retention.source() + ":"
                + retention.isReadOnly() + ":" + retention.synonyms().size());
            String refused;
            try {
                admin.incrementalAlterConfigs(Map.of(broker, List.of(new AlterConfigOp(
                    new ConfigEntry("log.dirs", "/elsewhere"), AlterConfigOp.OpType.SET))))
                    .all().get(30, TimeUnit.SECONDS);
                refused = "accepted";
            } catch (Exception e) {
                refused = e.getCause().getClass().getSimpleName();
            }
            result("broker.static_refused", refused);
            admin.incrementalAlterConfigs(Map.of(cluster, List.of(new AlterConfigOp(
                new ConfigEntry("log.retention.ms", null), AlterConfigOp.OpType.DELETE))))
                .all().get(30, TimeUnit.SECONDS);
        }
        System.out.println("DONE");
    }
}
