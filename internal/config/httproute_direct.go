package config

import networking "istio.io/api/networking/v1"

// HTTPRoute directResponse: the gateway (or Envoy) answers with a fixed
// status and body, calling no destination.
func init() {
	allow(&networking.HTTPRoute{}, "direct_response")
	allow(&networking.HTTPDirectResponse{}, "status", "body")
	allow(&networking.HTTPBody{}, "string", "bytes")
}

// maxDirectBody is the largest direct response body, as Istio bounds it.
const maxDirectBody = 1 << 20

func validateDirectResponse(c errs, path string, r *networking.HTTPRoute) {
	d := r.DirectResponse
	if len(r.Route) > 0 {
		c.add(join(path, "directResponse"), ErrInvalid, "may not be set with route: a route either answers itself or calls destinations")
	}
	if d.Status < 200 || d.Status > 599 {
		c.add(join(path, "directResponse.status"), ErrInvalid, "%d not in [200, 599]", d.Status)
	}
	if n := len(d.Body.GetString_()) + len(d.Body.GetBytes()); n > maxDirectBody {
		c.add(join(path, "directResponse.body"), ErrInvalid, "%d bytes, more than %d", n, maxDirectBody)
	}
}
