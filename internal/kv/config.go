package kv

// Consul's config entries (/v1/config, internal/consulapi) are records of
// this kind too, as nodes and sessions are: under
// configNS/<namespace>/<kind>/<name>, their JSON in the entry's value,
// durable, on the one revision sequence, written with Put and Delete
// (their CAS on the record's ModifyIndex) and shared by a cluster's
// servers.
const configNS = "~config"

// ConfigKey is where config entry kind/name of namespace ns is in the
// table: the table namespace and the key to Put, Delete and Get.
func ConfigKey(ns, kind, name string) (tableNS, key string) {
	return configNS, ns + "/" + kind + "/" + name
}

// ConfigPrefix is where the config entries of kind (every kind if "") of
// namespace ns are: the table namespace and the key prefix to List.
func ConfigPrefix(ns, kind string) (tableNS, prefix string) {
	if kind == "" {
		return configNS, ns + "/"
	}
	return configNS, ns + "/" + kind + "/"
}
