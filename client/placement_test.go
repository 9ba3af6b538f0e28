package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestPlacementCalls runs every placement call against the real server
// stack.
func TestPlacementCalls(t *testing.T) {
	ctx := context.Background()
	c := realServer(t)

	var n Node
	n.Metadata.Name = "a"
	n.Metadata.Labels = map[string]string{"zone": "z1"}
	n.Status.Allocatable = map[string]string{"cpu": "2", "memory": "4Gi", "pods": "110"}
	rev, err := c.PutNode(ctx, n)
	if err != nil || rev != 1 {
		t.Fatalf("put node: %d %v", rev, err)
	}
	nodes := `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: b, labels: {zone: z2}}
  status: {allocatable: {cpu: "1", memory: 1Gi, pods: "110"}}
- apiVersion: v1
  kind: Node
  metadata: {name: c, labels: {zone: z2}}
  spec: {taints: [{key: dedicated, value: gpu, effect: NoSchedule}]}
  status: {allocatable: {cpu: "8", memory: 8Gi, pods: "110"}}
`
	res, err := c.ApplyNodes(ctx, []byte(nodes))
	if err != nil || res.Revision != 2 || fmt.Sprint(res.Names) != "[b c]" || fmt.Sprint(res.Changed) != "[b c]" {
		t.Fatalf("apply nodes: %+v %v", res, err)
	}
	_, err = c.ApplyNodes(ctx, []byte(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"d"},"status":{"allocatable":{"cpu":"1.5x"}}}`))
	var e *Error
	if !errors.As(err, &e) || e.Status != 400 || e.Field != "status.allocatable.cpu" {
		t.Fatalf("bad node: %v", err)
	}
	page, err := c.ListNodes(ctx, NodeListOptions{Selector: "zone=z2", Limit: 1})
	if err != nil || len(page.Items) != 1 || page.Items[0].Node.Metadata.Name != "b" || page.NextPageToken == "" {
		t.Fatalf("list nodes: %+v %v", page, err)
	}
	page, err = c.ListNodes(ctx, NodeListOptions{Selector: "zone=z2", Limit: 1, PageToken: page.NextPageToken})
	if err != nil || len(page.Items) != 1 || page.Items[0].Node.Spec.Taints[0].Value != "gpu" {
		t.Fatalf("second page: %+v %v", page, err)
	}

	pods := `{"apiVersion":"v1","kind":"List","items":[
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","labels":{"app":"web"}},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"1500m"}}}]}},
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","labels":{"app":"web"}},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"1500m"}}}]}}]}`
	dry, err := c.Place(ctx, []byte(pods), true)
	if err != nil || !dry.DryRun || dry.Results[0].Node != "a" {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	placed, err := c.Place(ctx, []byte(pods), false)
	want := "0/3 nodes are available: 2 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: gpu}."
	if err != nil || placed.Revision != 3 || placed.Results[0].Node != "a" || placed.Results[1].Unschedulable != want {
		t.Fatalf("place: %+v %v", placed, err)
	}
	_, err = c.Place(ctx, []byte(pods), false)
	if !errors.As(err, &e) || e.Status != 409 || e.Field != "items[0].metadata.name" {
		t.Fatalf("placing again: %v", err)
	}
	p, err := c.GetPlacement(ctx, "default", "web-0")
	if err != nil || p.Node != "a" || p.Requests["cpu"] != "1500m" || p.Revision != 3 {
		t.Fatalf("get placement: %+v %v", p, err)
	}
	ps, err := c.ListPlacements(ctx, PlacementListOptions{Node: "a", Selector: "app=web"})
	if err != nil || len(ps.Items) != 1 {
		t.Fatalf("list placements: %+v %v", ps, err)
	}
	item, err := c.GetNode(ctx, "a")
	if err != nil || item.Requested["cpu"] != "1500m" || item.Placements != 1 || item.Node.Metadata.ResourceVersion != "1" {
		t.Fatalf("get node: %+v %v", item, err)
	}
	if rev, err := c.DeletePlacement(ctx, "default", "web-0"); err != nil || rev != 4 {
		t.Fatalf("delete placement: %d %v", rev, err)
	}
	if _, err := c.DeletePlacement(ctx, "default", "web-0"); !errors.As(err, &e) || e.Status != 404 {
		t.Fatalf("delete again: %v", err)
	}
	if _, err := c.Place(ctx, []byte(pods), false); err != nil {
		t.Fatal(err)
	}
	del, err := c.DeleteNode(ctx, "a")
	if err != nil || fmt.Sprint(del.Released) != "[default/web-0]" {
		t.Fatalf("delete node: %+v %v", del, err)
	}
}
