// Apache Kafka's Java client over SASL_SSL (SCRAM) against a broker with ACLs: run as a
// single-file program with the kafka-clients jar on the classpath:
//   java -cp ... SecurityChecks.java BOOTSTRAP CA_PEM MECHANISM ADMIN_USER ADMIN_PASSWORD
//        USER USER_PASSWORD
// ADMIN_USER is a super user; USER starts without ACLs. Each check prints
// "RESULT <check> <name> <value>" lines for the Python test; an unexpected exception fails.
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.config.SslConfigs;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.errors.TransactionalIdAuthorizationException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class SecurityChecks {
    static String bootstrap;
    static String caPem;
    static String mechanism;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        caPem = args[1];
        mechanism = args[2];
        String admin = args[3], adminPassword = args[4], user = args[5], userPassword = args[6];
        try (Admin client = Admin.create(secured(admin, adminPassword))) {
            client.createTopics(List.of(new NewTopic("j-secure", 1, (short) 1)))
                .all().get(60, TimeUnit.SECONDS);
            Map<String, UserScramCredentialsDescription> described =
                client.describeUserScramCredentials(List.of(user)).all().get(60, TimeUnit.SECONDS);
            List<String> mechanisms = new ArrayList<>();
            for (ScramCredentialInfo info : described.get(user).credentialInfos()) {
                mechanisms.add(info.mechanism().mechanismName());
            }
            result("admin", "user_mechanisms", mechanisms);
            wrongPassword(admin);
            result("denied", "produce", produceDenied(user, userPassword));
            result("denied", "transactional", transactionalDenied(user, userPassword));
            client.createAcls(List.of(
                allow(user, ResourceType.TOPIC, "j-secure", AclOperation.WRITE),
                allow(user, ResourceType.TOPIC, "j-secure", AclOperation.READ),
                allow(user, ResourceType.GROUP, "j-group", AclOperation.READ),
                allow(user, ResourceType.TRANSACTIONAL_ID, "j-txn", AclOperation.WRITE)))
                .all().get(60, TimeUnit.SECONDS);
            int listed = client.describeAcls(AclBindingFilter.ANY).values()
                .get(60, TimeUnit.SECONDS).size();
            result("admin", "acls_listed", listed);
            transactional(user, userPassword);
            result("allowed", "read_committed", consume(user, userPassword));
        }
        System.out.println("DONE");
    }

    static void result(String check, String name, Object value) {
        System.out.println("RESULT " + check + " " + name + " " + value);
    }

    static Properties secured(String user, String password) {
        Properties p = new Properties();
        p.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_SSL");
        p.put(SslConfigs.SSL_TRUSTSTORE_TYPE_CONFIG, "PEM");
        p.put(SslConfigs.SSL_TRUSTSTORE_LOCATION_CONFIG, caPem);
        p.put(SaslConfigs.SASL_MECHANISM, mechanism);
        p.put(SaslConfigs.SASL_JAAS_CONFIG,
            "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                + user + "\" password=\"" + password + "\";");
        p.put(CommonClientConfigs.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(CommonClientConfigs.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return p;
    }

    static Properties producer(String user, String password, String transactionalId) {
        Properties p = secured(user, password);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        if (transactionalId != null) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        }
        return p;
    }

    static AclBinding allow(String user, ResourceType type, String name, AclOperation operation) {
        return new AclBinding(new ResourcePattern(type, name, PatternType.LITERAL),
            new AccessControlEntry("User:" + user, "*", operation, AclPermissionType.ALLOW));
    }

    static void wrongPassword(String user) throws Exception {
        try (Admin client = Admin.create(secured(user, "not-the-password"))) {
            client.describeCluster().clusterId().get(30, TimeUnit.SECONDS);
            result("auth", "wrong_password", "accepted");
        } catch (ExecutionException e) {
            result("auth", "wrong_password", e.getCause() instanceof SaslAuthenticationException
                ? "SaslAuthenticationException" : e.getCause().toString());
        }
    }

    static String produceDenied(String user, String password) throws Exception {
        try (KafkaProducer<String, String> p = new KafkaProducer<>(producer(user, password, null))) {
            p.send(new ProducerRecord<>("j-secure", "k", "v")).get(30, TimeUnit.SECONDS);
            return "accepted";
        } catch (ExecutionException e) {
            // Topic- or ClusterAuthorizationException, whichever of Metadata and the
            // idempotent InitProducerId is refused first
            return e.getCause().getClass().getSimpleName();
        }
    }

    static String transactionalDenied(String user, String password) {
        try (KafkaProducer<String, String> p =
                 new KafkaProducer<>(producer(user, password, "j-txn-other"))) {
            p.initTransactions();
            return "accepted";
        } catch (TransactionalIdAuthorizationException e) {
            return "TransactionalIdAuthorizationException";
        } catch (RuntimeException e) {
            return e.toString();
        }
    }

    static void transactional(String user, String password) {
        try (KafkaProducer<String, String> p = new KafkaProducer<>(producer(user, password, "j-txn"))) {
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < 10; i++) {
                p.send(new ProducerRecord<>("j-secure", "k" + i, "committed-" + i));
            }
            p.commitTransaction();
            p.beginTransaction();
            p.send(new ProducerRecord<>("j-secure", "x", "aborted"));
            p.abortTransaction();
        }
    }

    static int consume(String user, String password) {
        Properties p = secured(user, password);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, "j-group");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        int committed = 0;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of("j-secure"));
            long deadline = System.currentTimeMillis() + 60_000;
            while (committed < 10 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    if (r.value().startsWith("committed-")) {
                        committed++;
                    } else {
                        return -1;  // an aborted record was delivered
                    }
                }
            }
            c.commitSync();
            TopicPartition tp = new TopicPartition("j-secure", 0);
            result("allowed", "group_offset", c.committed(java.util.Set.of(tp)).get(tp).offset());
        }
        return committed;
    }
}
