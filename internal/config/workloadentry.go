package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/locality"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// KindWorkloadEntry is Istio's WorkloadEntry: a workload the registry does
// not see register (a VM, a host outside the cluster), described in config.
// It is not a second registry: applying one writes a registry instance
// record (WorkloadInstance) in the same commit, owned by the object, which
// its delete removes (docs/controlplane.md, "WorkloadEntry").
const KindWorkloadEntry = "WorkloadEntry"

// Metadata keys a WorkloadEntry's instance carries besides its labels.
const (
	// MetaPortPrefix + a port's name holds the port's number: a
	// ServiceEntry selecting the instance reaches it on the number of its
	// port's name.
	MetaPortPrefix = "sextant.io/port."
	// MetaServiceAccount holds spec.serviceAccount.
	MetaServiceAccount = "sextant.io/service-account"
)

// canonicalLabels name the instance's service, the first set wins, as
// Istio names a workload's canonical service; none: the object's name.
var canonicalLabels = []string{"service.istio.io/canonical-name", "app.kubernetes.io/name", "app"}

// localityLabels are the locality keys a WorkloadEntry's locality fills,
// region/zone/subzone in order.
var localityLabels = []string{locality.LabelRegion, locality.LabelZone, locality.LabelSubZone}

func init() {
	kindGroups[KindWorkloadEntry] = Group
	allow(&networking.WorkloadEntry{}, "network", "service_account")
}

func validateWorkloadEntry(c errs, path string, o *Object) {
	we := o.WorkloadEntry
	n := len(*c.list)
	if we.Address == "" {
		c.add(join(path, "address"), ErrInvalid, "required: the workload's IP address or host name")
	} else if _, err := netip.ParseAddr(we.Address); err != nil && (!validHostName(we.Address) || strings.Contains(we.Address, "*")) {
		c.add(join(path, "address"), ErrInvalid, "%q: want an IP address or a host name (unix sockets are not supported)", we.Address)
	}
	for _, name := range slices.Sorted(maps.Keys(we.Ports)) {
		p := mapKey(join(path, "ports"), name)
		if !label.ValidKey(MetaPortPrefix + name) {
			c.add(p, ErrInvalid, "%q: want a port name of [A-Za-z0-9._-]", name)
		}
		if n := we.Ports[name]; n == 0 || n > 65535 {
			c.add(p, ErrInvalid, "%d: want 1..65535", n)
		}
	}
	validateSelector(c, join(path, "labels"), we.Labels)
	for k := range we.Labels {
		if k == instance.OwnerLabel || k == instance.NoPortLabel || k == MetaServiceAccount || strings.HasPrefix(k, MetaPortPrefix) {
			c.add(mapKey(join(path, "labels"), k), ErrInvalid, "is set by the server on the WorkloadEntry's instance: leave it out")
		}
	}
	if extra := 4 + len(we.Ports) + len(localityLabels); len(we.Labels)+extra > instance.MaxMetadata {
		c.add(join(path, "labels"), ErrInvalid, "%d labels: at most %d with %d ports (an instance holds %d metadata entries)",
			len(we.Labels), instance.MaxMetadata-extra, len(we.Ports), instance.MaxMetadata)
	}
	if svc := workloadService(o); !naming.ValidName(svc) {
		p, what := join(path, "labels"), "the label"
		for _, k := range canonicalLabels {
			if v, ok := we.Labels[k]; ok && v == svc {
				p, what = mapKey(p, k), "it"
				break
			}
		}
		c.add(p, ErrInvalid, "%q names the instance's service (%s): want 1..128 of [a-z0-9._-], starting and ending with a letter or digit", svc, what)
	}
	if we.Weight > instance.MaxWeight {
		c.add(join(path, "weight"), ErrInvalid, "%d: want 0..%d", we.Weight, instance.MaxWeight)
	}
	if we.Locality != "" {
		if parts := strings.Split(we.Locality, "/"); len(parts) > 3 || slices.Contains(parts, "") {
			c.add(join(path, "locality"), ErrInvalid, "%q: want region, region/zone or region/zone/subzone", we.Locality)
		}
	}
	if we.Network != "" {
		// Istio reaches another network's workloads through its east-west
		// gateway; Sextant has one network, every endpoint reached directly.
		c.add(join(path, "network"), ErrNotSupported, "%q: not supported: Sextant reaches every endpoint directly (one network)", we.Network)
	}
	if sa := we.ServiceAccount; sa != "" && (len(sa) > instance.MaxValueLen || !naming.ValidName(sa)) {
		c.add(join(path, "serviceAccount"), ErrInvalid, "%q: want 1..128 of [a-z0-9._-]", sa)
	}
	if len(*c.list) == n {
		// Backstop: the record must pass the registry's own validation.
		if err := instance.Prepare(-1, WorkloadInstance(o)); err != nil {
			c.add(path, ErrInvalid, "the WorkloadEntry's instance: %v", err)
		}
	}
}

// workloadService is the service of a WorkloadEntry's instance: its
// canonical service, as Istio names it.
func workloadService(o *Object) string {
	for _, k := range canonicalLabels {
		if v, ok := o.WorkloadEntry.Labels[k]; ok {
			return v
		}
	}
	return o.Name
}

// WorkloadOwner is the owner (instance.OwnerLabel) of the instance of
// WorkloadEntry k: only the object's apply and delete write it.
func WorkloadOwner(k Key) string { return k.String() }

// WorkloadInstanceID is the id of the instance of WorkloadEntry k:
// "we:<namespace>:<name>", or a digest of them when that is too long.
func WorkloadInstanceID(k Key) string {
	id := "we:" + k.Namespace + ":" + k.Name
	if len(id) > instance.MaxIDLen {
		sum := sha256.Sum256([]byte(k.Namespace + "/" + k.Name))
		id = "we:" + hex.EncodeToString(sum[:16])
	}
	return id
}

// WorkloadInstance returns the registry instance WorkloadEntry o is: its
// canonical service in its namespace, its address, its lowest-numbered
// port (none: a port-less instance, reached on the ports of the
// ServiceEntries that select it), its labels plus each port by name,
// its locality as the topology labels, its service account; weight as
// given (unset: the registry's default). Healthy: nothing judges it but
// the data plane's health checks.
func WorkloadInstance(o *Object) *instance.Instance {
	we := o.WorkloadEntry
	md := make(map[string]string, len(we.Labels)+len(we.Ports)+5)
	maps.Copy(md, we.Labels)
	md[instance.OwnerLabel] = WorkloadOwner(o.Key)
	port := 0
	for name, n := range we.Ports {
		md[MetaPortPrefix+name] = strconv.FormatUint(uint64(n), 10)
		if port == 0 || int(n) < port {
			port = int(n)
		}
	}
	if port == 0 {
		md[instance.NoPortLabel] = "true"
	}
	if we.Locality != "" {
		for i, part := range strings.SplitN(we.Locality, "/", 3) {
			if _, set := md[localityLabels[i]]; !set {
				md[localityLabels[i]] = part
			}
		}
	}
	if we.ServiceAccount != "" {
		md[MetaServiceAccount] = we.ServiceAccount
	}
	w := int(we.Weight)
	if w == 0 {
		w = instance.DefaultWeight
	}
	return &instance.Instance{
		ID: WorkloadInstanceID(o.Key), Namespace: o.Namespace, Service: workloadService(o),
		Host: we.Address, Port: port, Weight: w, Metadata: label.FromMap(md), Healthy: true,
	}
}

// IsWorkloadInstance reports whether in is a WorkloadEntry's instance.
func IsWorkloadInstance(in *instance.Instance) bool {
	v, _ := in.Metadata.Get(instance.OwnerLabel)
	return strings.HasPrefix(v, KindWorkloadEntry+"/")
}

// WorkloadPort is the port of a WorkloadEntry's instance named name, if it
// has one.
func WorkloadPort(in *instance.Instance, name string) (uint32, bool) {
	v, ok := in.Metadata.Get(MetaPortPrefix + name)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, 16)
	return uint32(n), err == nil && n > 0
}

// planWorkloadInstance writes the instance of WorkloadEntry o in tx (an
// apply of o, dry or not): refused if another writer's instance has its id.
func planWorkloadInstance(tx *commit.Tx, o *Object, dry bool) error {
	in := WorkloadInstance(o)
	if err := instance.Prepare(-1, in); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, o.Key, err)
	}
	now := tx.Now()
	in.CreatedAt, in.UpdatedAt = now, now
	v, _ := tx.Get(store.Instances, in.ID)
	cur, _ := v.(*instance.Instance)
	if cur != nil {
		if owner, _ := cur.Metadata.Get(instance.OwnerLabel); owner != WorkloadOwner(o.Key) {
			return fmt.Errorf("%w: instance %q, which %s writes, is registered by another writer (owner %q): deregister it first", ErrConflict, in.ID, o.Key, owner)
		}
		in.CreatedAt = cur.CreatedAt
	}
	if dry {
		return nil
	}
	tx.Put(store.Instances, in.ID, tx.Encode(in.AppendBinary), in)
	return nil
}

// planWorkloadDelete deletes the instance of WorkloadEntry k in tx, if the
// object wrote it.
func planWorkloadDelete(tx *commit.Tx, k Key) {
	id := WorkloadInstanceID(k)
	v, _ := tx.Get(store.Instances, id)
	if cur, ok := v.(*instance.Instance); ok {
		if owner, _ := cur.Metadata.Get(instance.OwnerLabel); owner == WorkloadOwner(k) {
			tx.Delete(store.Instances, id)
		}
	}
}
