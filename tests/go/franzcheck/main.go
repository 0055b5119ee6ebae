// franzcheck runs franz-go (github.com/twmb/franz-go) against a Kafka-protocol broker for
// lockgate's compatibility tests and its exactly-once chain benchmark. Each subcommand does one
// scenario and prints one JSON line with what it saw (counts, offsets, order, errors); the
// Python test or benchmark that started it judges the line. An error that stops the scenario
// is printed as {"error": ...} with exit status 1, so the caller always gets a line to show.
//
//	franzcheck produce-consume -brokers HOST:PORT -topic T [-partitions 3] [-records 1000] [-rack R]
//	franzcheck group -brokers HOST:PORT -topic T -group G -protocol classic|consumer [-records 600]
//	franzcheck eos -brokers HOST:PORT -input I -output O -group G [-workers 2] [-records 2000]
//	               [-max-poll 500] [-protocol classic|consumer] [-steps create,chain,fill,check]
//	franzcheck share -brokers HOST:PORT -topic T -group G [-consumers 2] [-records 200]
//
// Every run creates its topics itself (-replication for a cluster), so the caller only gives
// fresh names. -timeout bounds the whole run; -log-level shows franz-go's own log on stderr.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// common holds the flags every subcommand takes.
type common struct {
	brokers     string
	partitions  int
	replication int
	records     int
	timeout     time.Duration
	logLevel    string
}

func (c *common) register(flags *flag.FlagSet, records int) {
	flags.StringVar(&c.brokers, "brokers", "127.0.0.1:9092", "bootstrap brokers, comma separated")
	flags.IntVar(&c.partitions, "partitions", 3, "partitions of each topic created")
	flags.IntVar(&c.replication, "replication", 1, "replication factor of each topic created")
	flags.IntVar(&c.records, "records", records, "records to produce")
	flags.DurationVar(&c.timeout, "timeout", 120*time.Second, "bound on the whole run")
	flags.StringVar(&c.logLevel, "log-level", "none", "franz-go's log on stderr: none, error, warn, info, debug")
}

// clientOptions are the options of every client a run makes: its brokers, its log, and the
// request counter that reports which protocol the client really spoke.
func (c *common) clientOptions(requests *requestCounter) []kgo.Opt {
	options := []kgo.Opt{kgo.SeedBrokers(splitBrokers(c.brokers)...)}
	if level := parseLogLevel(c.logLevel); level != kgo.LogLevelNone {
		options = append(options, kgo.WithLogger(kgo.BasicLogger(os.Stderr, level, func() string {
			return time.Now().UTC().Format("15:04:05.000 ")
		})))
	}
	if requests != nil {
		options = append(options, kgo.WithHooks(requests))
	}
	return options
}

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: franzcheck produce-consume|group|eos|share [flags]"))
	}
	modes := map[string]func(context.Context, []string) (any, error){
		"produce-consume": runProduceConsume,
		"group":           runGroup,
		"eos":             runExactlyOnce,
		"share":           runShare,
	}
	run, ok := modes[os.Args[1]]
	if !ok {
		fail(fmt.Errorf("unknown mode %q: produce-consume, group, eos or share", os.Args[1]))
	}
	result, err := run(context.Background(), os.Args[2:])
	if err != nil {
		fail(err)
	}
	emit(result)
}

// withDeadline parses the flags and returns the context bounding the run.
func withDeadline(ctx context.Context, flags *flag.FlagSet, c *common, args []string) (context.Context, context.CancelFunc, error) {
	if err := flags.Parse(args); err != nil {
		return nil, nil, err
	}
	if c.partitions < 1 || c.records < 1 || c.replication < 1 {
		return nil, nil, fmt.Errorf("-partitions, -records and -replication must be positive")
	}
	deadlined, cancel := context.WithTimeout(ctx, c.timeout)
	return deadlined, cancel, nil
}

func emit(result any) {
	line, err := json.Marshal(result)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(line))
}

func fail(err error) {
	line, _ := json.Marshal(map[string]string{"error": err.Error()})
	fmt.Println(string(line))
	os.Exit(1)
}
