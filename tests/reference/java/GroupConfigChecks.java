// Kafka 4's AdminClient on group configs (ConfigResource.Type.GROUP): set, read back with
// synonyms, refused values (the exception class and message), APPEND, validateOnly and
// DELETE. Prints "RESULT <check> <name> <value>" lines and DONE; the Python test runs it against
// lockgate and against Kafka and compares.
import java.util.*;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.config.ConfigResource;

public class GroupConfigChecks {
    static void result(String name, Object value) {
        System.out.println("RESULT " + name.replace(".", " ") + " " + value);
    }

    static String alter(Admin admin, ConfigResource group, AlterConfigOp... ops) throws Exception {
        try {
            admin.incrementalAlterConfigs(Map.of(group, List.of(ops))).all().get(30, TimeUnit.SECONDS);
            return "ok";
        } catch (ExecutionException e) {
            return e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage();
        }
    }

    static AlterConfigOp set(String name, String value) {
        return new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET);
    }

    static String shown(ConfigEntry entry) {
        List<String> synonyms = new ArrayList<>();
        for (ConfigEntry.ConfigSynonym s : entry.synonyms()) {
            synonyms.add(s.name() + "=" + s.value() + "@" + s.source());
        }
        return entry.value() + ":" + entry.source() + ":" + entry.isDefault() + ":" + entry.isReadOnly()
            + ":" + entry.type() + ":" + synonyms;
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        try (Admin admin = Admin.create(props)) {
            ConfigResource group = new ConfigResource(ConfigResource.Type.GROUP, "java-group-configs");
            result("alter.set", alter(admin, group, set("share.auto.offset.reset", "earliest"),
                set("consumer.heartbeat.interval.ms", "6000")));
            result("alter.unknown", alter(admin, group, set("share.no.such", "1")));
            result("alter.range", alter(admin, group, set("share.delivery.count.limit", "50")));
            result("alter.type", alter(admin, group, set("share.session.timeout.ms", "soon")));
            result("alter.append", alter(admin, group, new AlterConfigOp(
                new ConfigEntry("share.isolation.level", "read_committed"), AlterConfigOp.OpType.APPEND)));
            admin.incrementalAlterConfigs(Map.of(group, List.of(set("share.isolation.level", "read_committed"))),
                new AlterConfigsOptions().validateOnly(true)).all().get(30, TimeUnit.SECONDS);
            Config config = admin.describeConfigs(List.of(group), new DescribeConfigsOptions().includeSynonyms(true))
                .all().get(30, TimeUnit.SECONDS).get(group);
            List<String> names = new ArrayList<>();
            for (ConfigEntry entry : config.entries()) {
                names.add(entry.name());
            }
            Collections.sort(names);
            result("describe.names", names);
            for (String name : List.of("share.auto.offset.reset", "consumer.heartbeat.interval.ms",
                    "share.isolation.level", "share.session.timeout.ms", "streams.assignor.name")) {
                result("describe." + name.replace(".", "_"), shown(config.get(name)));
            }
            result("alter.delete", alter(admin, group, new AlterConfigOp(
                new ConfigEntry("consumer.heartbeat.interval.ms", ""), AlterConfigOp.OpType.DELETE)));
            ConfigEntry after = admin.describeConfigs(List.of(group)).all().get(30, TimeUnit.SECONDS)
                .get(group).get("consumer.heartbeat.interval.ms");
            result("describe.after_delete", after.value() + ":" + after.source());
            result("alter.cleanup", alter(admin, group, new AlterConfigOp(
                new ConfigEntry("share.auto.offset.reset", ""), AlterConfigOp.OpType.DELETE)));
        }
        System.out.println("DONE");
    }
}
