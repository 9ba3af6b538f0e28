package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sextant-mesh/sextant/internal/bench/kubepush"
	benchpush "github.com/sextant-mesh/sextant/internal/bench/push"
)

// peerFlags are "bench push --peer"'s own flags.
type peerFlags struct {
	peer           string
	kubeTestServer string
	istiod         string
	istioCRDs      string
	rounds         int
	drChanges      int
}

func addPeerFlags(fl *pflag.FlagSet) *peerFlags {
	p := &peerFlags{}
	fl.StringVar(&p.peer, "peer", "", "run a peer control plane in turn with Sextant on the same workload, both reading a real kube-apiserver, and print each figure and the ratio: istiod (docs/perf/push.md)")
	fl.StringVar(&p.kubeTestServer, "kube-testserver", os.Getenv("SEXTANT_KUBE_TESTSERVER"), "with --peer: test/kube's kube-testserver binary (default $SEXTANT_KUBE_TESTSERVER)")
	fl.StringVar(&p.istiod, "istiod", os.Getenv("SEXTANT_ISTIOD"), "with --peer istiod: the stock istiod (pilot-discovery) binary tools/istiod builds (default $SEXTANT_ISTIOD)")
	fl.StringVar(&p.istioCRDs, "istio-crds", "", "with --peer: Istio's crd-all.gen.yaml (default: from the module cache, go mod download)")
	fl.IntVar(&p.rounds, "rounds", 1, "with --peer: rounds, each Sextant and the peer in turn (the order alternating); figures are medians")
	fl.IntVar(&p.drChanges, "dr-changes", 20, "with --peer: DestinationRule changes made one at a time, nothing else changing, for the CPU per change")
	return p
}

// benchPushPeer runs "bench push --peer": Sextant (this binary, or
// --server-bin) and the peer, in turn, against one kube-apiserver.
func benchPushPeer(cmd *cobra.Command, cfg benchpush.Config, p *peerFlags, serverBin string, logs bool) error {
	if p.peer != "istiod" {
		return fmt.Errorf("unknown --peer %q: istiod is the one peer", p.peer)
	}
	fl := cmd.Flags()
	if fl.Changed("protocol") && cfg.Delta {
		return fmt.Errorf("--peer istiod: the subscribers are state of the world (--protocol sotw)")
	}
	for _, f := range []string{"servers", "store", "policy", "cpuprofile", "server-cpuprofile", "resyncs", "churn-only-during-config"} {
		if fl.Changed(f) {
			return fmt.Errorf("--%s is not for --peer", f)
		}
	}
	if serverBin == "" {
		var err error
		if serverBin, err = os.Executable(); err != nil {
			return err
		}
	}
	kc := kubepush.Config{KubeTestServer: p.kubeTestServer, Istiod: p.istiod, Sextant: serverBin, IstioCRDs: p.istioCRDs,
		Duration: cfg.Duration, ChurnPerSec: cfg.ChurnPerSec, ConfigEvery: cfg.ConfigEvery,
		DRChanges: p.drChanges, Rounds: p.rounds, Progress: os.Stderr}
	// The peer's own defaults (200 services, 2,000 endpoints, 200
	// subscribers) unless given.
	if fl.Changed("services") {
		kc.Services = cfg.Services
	}
	if fl.Changed("endpoints") {
		kc.Endpoints = cfg.Endpoints
	}
	if fl.Changed("subscribers") {
		kc.Subscribers = cfg.Subscribers
	}
	if logs {
		kc.Logs = os.Stderr
	}
	if kc.KubeTestServer == "" {
		return fmt.Errorf("--peer istiod needs the kube-testserver binary: --kube-testserver or $SEXTANT_KUBE_TESTSERVER (go -C test/kube build -o bin/kube-testserver ./cmd/kube-testserver)")
	}
	if kc.Istiod == "" {
		return fmt.Errorf("--peer istiod needs the istiod binary: --istiod or $SEXTANT_ISTIOD (go -C tools/istiod build -o bin/istiod istio.io/istio/pilot/cmd/pilot-discovery)")
	}
	_, err := kubepush.Run(cmd.Context(), kc, cmd.OutOrStdout())
	return err
}
