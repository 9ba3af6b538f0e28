package kube

import (
	"encoding/json"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sextant-mesh/sextant/internal/instance"
)

// fixed is an objects of fixed pods and nodes.
type fixed struct {
	pods  map[string]*corev1.Pod
	nodes map[string]*corev1.Node
}

func (f fixed) pod(ns, name string) *corev1.Pod { return f.pods[ns+"/"+name] }
func (f fixed) node(name string) *corev1.Node   { return f.nodes[name] }

// TestConvertPorts: one instance per address and port; a service of
// several ports gives a service per port name; protocols from appProtocol
// or the port's name; a slice of no service gives nothing.
func TestConvertPorts(t *testing.T) {
	es := slice("ns", "s", "svc", discoveryv1.Endpoint{Addresses: []string{"10.0.0.1", "10.0.0.2"}})
	es.Ports = []discoveryv1.EndpointPort{
		{Name: ptr("http-web"), Port: ptr(int32(80))},
		{Name: ptr("rpc"), Port: ptr(int32(9090)), AppProtocol: ptr("grpc")},
		{Name: ptr("nil-port")},
	}
	got := convert(es, nil)
	if len(got) != 4 {
		t.Fatalf("%d instances, want 4 (2 addresses x 2 ports)", len(got))
	}
	want := map[string]string{"svc.http-web:80": "http", "svc.rpc:9090": "grpc"}
	for _, in := range got {
		k := fmt.Sprintf("%s:%d", in.Service, in.Port)
		if p, ok := want[k]; !ok || p != in.Protocol {
			t.Errorf("instance %s protocol %q", k, in.Protocol)
		}
		if v, _ := in.Metadata.Get(instance.OwnerLabel); v != Owner {
			t.Errorf("owner %q", v)
		}
	}
	delete(es.Labels, discoveryv1.LabelServiceName)
	if got := convert(es, nil); len(got) != 0 {
		t.Errorf("a slice of no service gave %d instances", len(got))
	}
}

// TestConvertHealth: ready is passing, serving and terminating is draining
// (isolated), anything else is critical (a critical check); nil
// conditions are ready.
func TestConvertHealth(t *testing.T) {
	for _, c := range []struct {
		name               string
		cond               discoveryv1.EndpointConditions
		critical, isolated bool
	}{
		{"nil", discoveryv1.EndpointConditions{}, false, false},
		{"ready", discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true)}, false, false},
		{"draining", discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}, false, true},
		{"terminated", discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)}, true, false},
		{"not ready", discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false)}, true, false},
	} {
		es := slice("ns", "s", "svc", discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, Conditions: c.cond})
		in := convert(es, nil)[0]
		if in.Critical() != c.critical || in.Isolated != c.isolated {
			t.Errorf("%s: critical %v isolated %v, want %v %v", c.name, in.Critical(), in.Isolated, c.critical, c.isolated)
		}
	}
}

// TestConvertLabels: pod labels (version drives the instance version),
// the zone of the endpoint over the node's, the node's region; label keys
// Sextant does not take are left out.
func TestConvertLabels(t *testing.T) {
	objs := fixed{
		pods: map[string]*corev1.Pod{"ns/p": {ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns",
			Labels: map[string]string{"app": "a", "version": "v2", "bad key!": "x"}}}},
		nodes: map[string]*corev1.Node{"n": {ObjectMeta: metav1.ObjectMeta{Name: "n",
			Labels: map[string]string{ZoneLabel: "node-zone", RegionLabel: "r"}}}},
	}
	ep := discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "p"},
		NodeName: ptr("n"), Zone: ptr("ep-zone")}
	in := convert(slice("ns", "s", "svc", ep), objs)[0]
	if in.Version != "v2" {
		t.Errorf("version %q", in.Version)
	}
	for k, want := range map[string]string{"app": "a", ZoneLabel: "ep-zone", RegionLabel: "r", PodLabel: "p"} {
		if got, _ := in.Metadata.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if _, ok := in.Metadata.Get("bad key!"); ok {
		t.Error("an invalid key was kept")
	}
}

// FuzzConvert: any EndpointSlice the API could hand over converts without
// panicking, into instances that pass validation.
func FuzzConvert(f *testing.F) {
	f.Add([]byte(`{"metadata":{"namespace":"ns","name":"s","labels":{"kubernetes.io/service-name":"svc"}},"addressType":"IPv4","endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":false,"serving":true,"terminating":true}}],"ports":[{"name":"http","port":80}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var es discoveryv1.EndpointSlice
		if json.Unmarshal(b, &es) != nil {
			return
		}
		for _, in := range convert(&es, nil) {
			c := in.Clone()
			c.Checks = in.Checks
			if err := instance.Prepare(-1, c); err != nil {
				t.Fatalf("converted instance fails validation: %v", err)
			}
		}
	})
}

// BenchmarkConvert: one EndpointSlice of 100 endpoints (its pods' labels
// and node looked up) to its 100 instances.
func BenchmarkConvert(b *testing.B) {
	objs := fixed{pods: map[string]*corev1.Pod{}, nodes: map[string]*corev1.Node{"n": {ObjectMeta: metav1.ObjectMeta{Name: "n",
		Labels: map[string]string{ZoneLabel: "z", RegionLabel: "r"}}}}}
	es := slice("ns", "s", "svc")
	for i := range 100 {
		name := fmt.Sprintf("p%d", i)
		objs.pods["ns/"+name] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns",
			Labels: map[string]string{"app": "svc", "version": "v1", "pod-template-hash": "abc123"}}}
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: name}, NodeName: ptr("n")})
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(convert(es, objs)) != 100 {
			b.Fatal("not 100 instances")
		}
	}
}
