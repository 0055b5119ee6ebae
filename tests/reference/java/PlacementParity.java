// Kafka 4.4's replica placement (the controller's StripedReplicaPlacer) on the clusters the
// Python test writes to stdin, one a line: "<seed> <partitions> <factor> <id>:<rack>:<fenced>,..."
// (rack "-": none; fenced 1 or 0). The placer draws from a java.util.Random whose generator is
// Kafka's test MockRandom's, started at <seed>. Prints one line a cluster: the partitions'
// replicas ("1,2,3;2,3,1;...") or "ERROR <message>", then DONE.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Optional;
import java.util.Random;
import java.util.stream.Collectors;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.metadata.placement.ClusterDescriber;
import org.apache.kafka.metadata.placement.PartitionAssignment;
import org.apache.kafka.metadata.placement.PlacementSpec;
import org.apache.kafka.metadata.placement.StripedReplicaPlacer;
import org.apache.kafka.metadata.placement.UsableBroker;

public class PlacementParity {
    static final class SteppedRandom extends Random {
        private long state;

        SteppedRandom(long state) {
            this.state = state;
        }

        @Override
        protected int next(int bits) {
            state = state * 2862933555777941757L + 3037000493L;
            return (int) (state >>> (64 - bits));
        }
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String[] fields = line.trim().split(" ");
            List<UsableBroker> brokers = new ArrayList<>();
            for (String broker : fields[3].split(",")) {
                String[] parts = broker.split(":");
                Optional<String> rack = parts[1].equals("-") ? Optional.empty() : Optional.of(parts[1]);
                brokers.add(new UsableBroker(Integer.parseInt(parts[0]), rack, parts[2].equals("1")));
            }
            ClusterDescriber cluster = new ClusterDescriber() {
                @Override
                public Iterator<UsableBroker> usableBrokers() {
                    return brokers.iterator();
                }

                @Override
                public Uuid defaultDir(int brokerId) {
                    return Uuid.ZERO_UUID;
                }
            };
            StripedReplicaPlacer placer = new StripedReplicaPlacer(new SteppedRandom(Long.parseLong(fields[0])));
            PlacementSpec spec = new PlacementSpec(0, Integer.parseInt(fields[1]), Short.parseShort(fields[2]));
            try {
                List<String> partitions = new ArrayList<>();
                for (PartitionAssignment assignment : placer.place(spec, cluster).assignments()) {
                    partitions.add(assignment.replicas().stream().map(String::valueOf)
                        .collect(Collectors.joining(",")));
                }
                System.out.println(String.join(";", partitions));
            } catch (RuntimeException e) {
                System.out.println("ERROR " + e.getMessage());
            }
        }
        System.out.println("DONE");
    }
}
