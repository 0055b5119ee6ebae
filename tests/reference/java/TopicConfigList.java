// Apache Kafka's own list of topic configs (LogConfig.configNames() of the reference jars):
// one line per config, "CONFIG <name> <type> <internal> <default>" (the default as ConfigDef
// writes it, empty for none), then DONE. The Python test compares lockgate's table with it.
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.storage.internals.log.LogConfig;

public class TopicConfigList {
    public static void main(String[] args) {
        for (String name : LogConfig.configNames()) {
            ConfigDef.ConfigKey key = LogConfig.configKeys().get(name);
            String value = key.defaultValue == null ? "" : ConfigDef.convertToString(key.defaultValue, key.type);
            System.out.println("CONFIG " + name + " " + key.type + " " + key.internalConfig + " " + value);
        }
        System.out.println("DONE");
    }
}
