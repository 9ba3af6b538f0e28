package gateway

// A gateway serves the mesh's proxy listener on its --listen port until an
// Istio Gateway has a plaintext server on that port; then it serves that
// Gateway port's listener. As Istio serves one listener per port, routing
// by host, the mesh's virtual hosts stay served beside the Gateway's: a
// Host a Gateway's VirtualService names goes by the Gateway's routes, any
// other the mesh's (Host: orders), the most specific domain first
// (exact, *.suffix, then "*"), the Gateway's first for the same one.

// meshBeside returns the mesh's proxy listener when ls is a Gateway port's
// plaintext listener chosen by the --listen port (not named by
// --listener), whose calls the mesh's routes also serve; else nil.
func (g *Gateway) meshBeside(ls *listenerSpec, all map[string]any) *listenerSpec {
	if g.opts.Listener != "" || ls.name == ProxyListener || ls.tls || ls.rds == "" {
		return nil
	}
	mesh, _ := all[ProxyListener].(*listenerSpec)
	if mesh == nil || mesh.tls || mesh.rds == "" {
		return nil
	}
	return mesh
}

// withMesh is the Gateway port's routes rc followed by the mesh's (m, a
// *routeConfigSpec or nil until it arrives).
func withMesh(rc *routeConfigSpec, m any) *routeConfigSpec {
	mesh, _ := m.(*routeConfigSpec)
	switch {
	case mesh == nil:
		return rc
	case rc == nil:
		return mesh
	}
	merged := *rc
	merged.vhosts = append(append(make([]*vhostSpec, 0, len(rc.vhosts)+len(mesh.vhosts)), rc.vhosts...), mesh.vhosts...)
	return &merged
}
