package placement

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ResourceList renders r as Kubernetes quantities ("1500m", "16Gi"), for
// answers such as a node's "requested". Zero cpu and memory are left out.
func (r *Resources) ResourceList() corev1.ResourceList {
	out := corev1.ResourceList{}
	if r.CPU != 0 {
		out[corev1.ResourceCPU] = *resource.NewMilliQuantity(r.CPU, resource.DecimalSI)
	}
	if r.Memory != 0 {
		out[corev1.ResourceMemory] = *resource.NewQuantity(r.Memory, resource.BinarySI)
	}
	if r.EphemeralStorage != 0 {
		out[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(r.EphemeralStorage, resource.BinarySI)
	}
	for _, s := range r.Scalars {
		format := resource.DecimalSI
		if len(s.Name) > len(corev1.ResourceHugePagesPrefix) && s.Name[:len(corev1.ResourceHugePagesPrefix)] == corev1.ResourceHugePagesPrefix {
			format = resource.BinarySI
		}
		out[corev1.ResourceName(s.Name)] = *resource.NewQuantity(s.Value, format)
	}
	return out
}

// Kubernetes renders the node as the Kubernetes Node the API returns: the
// fields Sextant keeps (name, labels, taints, unschedulable, allocatable).
func (n *Node) Kubernetes() *corev1.Node {
	k := &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: n.Name},
		Spec:       corev1.NodeSpec{Unschedulable: n.Unschedulable},
	}
	if n.Labels.Len() > 0 {
		k.Labels = n.Labels.Map()
	}
	for _, t := range n.Taints {
		k.Spec.Taints = append(k.Spec.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	k.Status.Allocatable = n.Allocatable.ResourceList()
	k.Status.Allocatable[corev1.ResourcePods] = *resource.NewQuantity(n.Pods, resource.DecimalSI)
	return k
}
