// hosts.js: the config host mapping of docs/controlplane.md ("Hosts name
// registry services"): orders, orders.ns, orders.ns.svc[.cluster.local].

// serviceOfHost returns {namespace, name} for host in an object of
// namespace ns, or null for a host that names no service.
export function serviceOfHost(host, ns) {
  let h = host.trim();
  if (!h || h.includes('*')) return null;
  for (const suffix of ['.svc.cluster.local', '.svc']) {
    if (h.endsWith(suffix)) { h = h.slice(0, -suffix.length); break; }
  }
  const dot = h.lastIndexOf('.');
  if (dot < 0) return { namespace: ns, name: h };
  return { namespace: h.slice(dot + 1), name: h.slice(0, dot) };
}
