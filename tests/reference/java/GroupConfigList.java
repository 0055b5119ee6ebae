// Apache Kafka's own list of group configs (GroupConfig of the reference jars): one line per
// config, "CONFIG <name> <type> <internal> <synonym> <default>" (the broker property it
// overrides, "-" for none; the default as ConfigDef writes it, empty for none), then DONE.
// The Python test compares lockgate's table with it.
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.coordinator.group.GroupConfig;

public class GroupConfigList {
    public static void main(String[] args) {
        for (ConfigDef.ConfigKey key : GroupConfig.CONFIG_DEF.configKeys().values()) {
            String value = key.defaultValue == null ? "" : ConfigDef.convertToString(key.defaultValue, key.type);
            String synonym = GroupConfig.brokerSynonym(key.name).orElse("-");
            System.out.println("CONFIG " + key.name + " " + key.type + " " + key.internalConfig + " "
                + synonym + " " + value);
        }
        System.out.println("DONE");
    }
}
