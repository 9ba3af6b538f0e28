package xds

import (
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc"
)

// secretService is the Secret Discovery Service (SDS over its own gRPC
// service, not ADS): what Envoy asks a local agent's unix socket for
// (istio-agent's, "sextant identity agent --sds"). Its streams are the
// server's streams: the same cache, subscribers and rules.
type secretService struct {
	secretv3.UnimplementedSecretDiscoveryServiceServer
	s *Server
}

func (ss secretService) StreamSecrets(stream secretv3.SecretDiscoveryService_StreamSecretsServer) error {
	return ss.s.StreamAggregatedResources(stream)
}

func (ss secretService) DeltaSecrets(stream secretv3.SecretDiscoveryService_DeltaSecretsServer) error {
	return ss.s.DeltaAggregatedResources(stream)
}

// RegisterSecrets adds the Secret Discovery Service to g (made with
// ServerOption()), served from the same cache as ADS.
func (s *Server) RegisterSecrets(g *grpc.Server) {
	secretv3.RegisterSecretDiscoveryServiceServer(g, secretService{s: s})
}
