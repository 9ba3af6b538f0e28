package placement

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
)

// maxQuantity bounds every quantity (in millicores or base units) so that
// sums over many workloads cannot overflow.
const maxQuantity = 1 << 53

// Kubernetes' scoring defaults for a container that requests no cpu or memory.
const (
	defaultMilliCPURequest = 100
	defaultMemoryRequest   = 200 * 1024 * 1024
)

// quantity returns q in millicores for cpu and base units otherwise.
func quantity(name corev1.ResourceName, q resource.Quantity, path string) (int64, error) {
	if q.Sign() < 0 {
		return 0, fieldErr(path, "must be greater than or equal to 0, got %s", q.String())
	}
	f := q.AsApproximateFloat64()
	if name == corev1.ResourceCPU {
		f *= 1000
	}
	if f > maxQuantity {
		return 0, fieldErr(path, "quantity %s is too large", q.String())
	}
	if name == corev1.ResourceCPU {
		return q.MilliValue(), nil
	}
	if name != corev1.ResourceMemory && name != corev1.ResourceEphemeralStorage && !strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
		if q.MilliValue()%1000 != 0 {
			return 0, fieldErr(path, "must be an integer, got %s", q.String())
		}
	}
	return q.Value(), nil
}

// isScalarResource is kube-scheduler's IsScalarResourceName: extended
// resources, hugepages, kubernetes.io-prefixed and attachable volumes.
func isScalarResource(name corev1.ResourceName) bool {
	s := string(name)
	return isExtendedResource(name) || strings.HasPrefix(s, corev1.ResourceHugePagesPrefix) ||
		strings.Contains(s, "kubernetes.io/") || strings.HasPrefix(s, corev1.ResourceAttachableVolumesPrefix)
}

func isExtendedResource(name corev1.ResourceName) bool {
	s := string(name)
	if !strings.Contains(s, "/") || strings.Contains(s, "kubernetes.io/") || strings.HasPrefix(s, "requests.") {
		return false
	}
	return len(content.IsLabelKey("requests."+s)) == 0
}

// containerResource checks a container's request name: Kubernetes accepts
// the standard ones and extended resources.
func containerResource(name corev1.ResourceName) bool {
	switch name {
	case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return true
	}
	return strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) || isExtendedResource(name)
}

type rvec map[corev1.ResourceName]int64

func (v rvec) add(o rvec) {
	for k, x := range o {
		v[k] += x
	}
}

func (v rvec) setMax(o rvec) {
	for k, x := range o {
		if x > v[k] {
			v[k] = x
		}
	}
}

// podRequests follows Kubernetes' resource helper PodRequests: containers
// are summed; a restartable (sidecar) init container adds to the sum and to
// what every later init container runs beside; the pod needs the larger of
// the sum and the largest init step; overhead is added. nonMissing counts a
// container without a cpu or memory request as the scoring defaults.
func podRequests(spec *corev1.PodSpec, vals map[*corev1.ResourceList]rvec, nonMissing bool) rvec {
	cvec := func(rl *corev1.ResourceList) rvec {
		v := rvec{}
		v.add(vals[rl])
		if nonMissing {
			if _, ok := (*rl)[corev1.ResourceCPU]; !ok {
				v[corev1.ResourceCPU] += defaultMilliCPURequest
			}
			if _, ok := (*rl)[corev1.ResourceMemory]; !ok {
				v[corev1.ResourceMemory] += defaultMemoryRequest
			}
		}
		return v
	}
	reqs := rvec{}
	for i := range spec.Containers {
		reqs.add(cvec(&spec.Containers[i].Resources.Requests))
	}
	sidecars, initMax := rvec{}, rvec{}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		v := cvec(&c.Resources.Requests)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			reqs.add(v)
			sidecars.add(v)
			v = rvec{}
			v.add(sidecars)
		} else {
			v.add(sidecars)
		}
		initMax.setMax(v)
	}
	reqs.setMax(initMax)
	reqs.add(vals[&spec.Overhead])
	return reqs
}

func (v rvec) resources() Resources {
	var r Resources
	for name, x := range v {
		switch {
		case name == corev1.ResourceCPU:
			r.CPU = x
		case name == corev1.ResourceMemory:
			r.Memory = x
		case name == corev1.ResourceEphemeralStorage:
			r.EphemeralStorage = x
		case isScalarResource(name):
			r.Scalars = append(r.Scalars, Scalar{Name: string(name), Value: x})
		}
	}
	r.Scalars = sortScalars(r.Scalars)
	return r
}
