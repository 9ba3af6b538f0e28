package config

import networking "istio.io/api/networking/v1"

// outlierDetection's local-origin errors (connect failures, resets,
// timeouts told apart from the endpoint's 5xx answers), as Istio's
// applyOutlierDetection publishes them (xds.outlier). minHealthPercent
// (Envoy's panic threshold) is not read: the gateway has no panic
// threshold to set.
func init() {
	allow(&networking.OutlierDetection{}, "split_external_local_origin_errors", "consecutive_local_origin_failures")
}
