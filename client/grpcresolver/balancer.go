package grpcresolver

import (
	"errors"
	"time"

	grpcbalancer "google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sextant-mesh/sextant/internal/balancer"
)

// BalancerName is the gRPC load-balancing policy the resolver selects in
// its service config ({"loadBalancingConfig":[{"sextant_adaptive":{}}]}).
const BalancerName = "sextant_adaptive"

func registerBalancer() { grpcbalancer.Register(balancerBuilder{}) }

// balancerBuilder gives every ClientConn its own adaptive policy, so that
// learned state (limits, latency) belongs to one connection's endpoints.
// grpc-go's base balancer owns the SubConns; this package only picks.
type balancerBuilder struct{}

func (balancerBuilder) Name() string { return BalancerName }

func (balancerBuilder) Build(cc grpcbalancer.ClientConn, opts grpcbalancer.BuildOptions) grpcbalancer.Balancer {
	policy, err := balancer.New("adaptive")
	if err != nil {
		panic("grpcresolver: the adaptive policy is missing: " + err.Error())
	}
	pb := &pickerBuilder{policy: policy}
	return base.NewBalancerBuilder(BalancerName, pb, base.Config{}).Build(cc, opts)
}

// pickerBuilder builds a picker over the READY SubConns each time that set
// changes. Called by the base balancer, one call at a time, as
// balancer.Policy.Build requires.
type pickerBuilder struct {
	policy balancer.Policy
}

func (pb *pickerBuilder) Build(info base.PickerBuildInfo) grpcbalancer.Picker {
	if len(info.ReadySCs) == 0 {
		return base.NewErrPicker(grpcbalancer.ErrNoSubConnAvailable)
	}
	p := &picker{scs: make([]grpcbalancer.SubConn, 0, len(info.ReadySCs))}
	eps := make([]balancer.Endpoint, 0, len(info.ReadySCs))
	for sc, sci := range info.ReadySCs {
		ep := balancer.Endpoint{ID: sci.Address.Addr, Addr: sci.Address.Addr, Weight: 100}
		if v, ok := sci.Address.BalancerAttributes.Value(instanceKey{}).(instanceInfo); ok {
			ep.ID, ep.Weight = v.id, v.weight
		}
		eps = append(eps, ep)
		p.scs = append(p.scs, sc)
	}
	p.p = pb.policy.Build(eps)
	return p
}

// picker picks a SubConn with the adaptive policy; each RPC's end reports
// its latency and outcome back to the policy.
type picker struct {
	p   balancer.Picker
	scs []grpcbalancer.SubConn
}

// errShed is the RPC's status when every endpoint is estimated full: the
// call fails fast at the caller instead of queueing at a server.
var errShed = status.Error(codes.Unavailable, "grpcresolver: shed, every endpoint is at capacity")

func (p *picker) Pick(grpcbalancer.PickInfo) (grpcbalancer.PickResult, error) {
	i, err := p.p.Pick()
	if err != nil {
		if errors.Is(err, balancer.ErrShed) {
			return grpcbalancer.PickResult{}, errShed
		}
		return grpcbalancer.PickResult{}, grpcbalancer.ErrNoSubConnAvailable
	}
	start := time.Now()
	return grpcbalancer.PickResult{
		SubConn: p.scs[i],
		Done:    func(di grpcbalancer.DoneInfo) { p.p.Done(i, time.Since(start), outcome(di)) },
	}, nil
}

// outcome classifies an RPC's end for the policy: RESOURCE_EXHAUSTED is a
// rejection (the server refused at once), DEADLINE_EXCEEDED a timeout,
// CANCELLED the caller's own doing; UNAVAILABLE, INTERNAL, UNKNOWN, ABORTED
// and DATA_LOSS are failures of the endpoint; any other code is the
// application answering, which says the endpoint works.
func outcome(di grpcbalancer.DoneInfo) balancer.Outcome {
	if di.Err == nil {
		return balancer.Success
	}
	switch status.Code(di.Err) {
	case codes.ResourceExhausted:
		return balancer.Rejected
	case codes.DeadlineExceeded:
		return balancer.Timeout
	case codes.Canceled:
		return balancer.Canceled
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.Aborted, codes.DataLoss:
		return balancer.Failed
	}
	return balancer.Success
}
