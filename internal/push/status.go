package push

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/sextant-mesh/sextant/internal/xds"
)

// EngineStatus is the engine's side of push status.
type EngineStatus struct {
	// Revision is the last change handed to the workers.
	Revision int64 `json:"revision"`
	// Changes counts the changes followed since Run started.
	Changes int64 `json:"changes"`
	// EndpointQueue and ConfigQueue are the work waiting on each path.
	EndpointQueue int `json:"endpoint_queue"`
	ConfigQueue   int `json:"config_queue"`
	// EndpointRecomputes counts services whose endpoint sets were
	// recomputed; ConfigRounds counts config rounds.
	EndpointRecomputes int64 `json:"endpoint_recomputes"`
	ConfigRounds       int64 `json:"config_rounds"`
	// LastConfigRoundMS is how long the last config round took;
	// FullConfigMS and FullEndpointsMS how long the full recomputation at
	// start took (every cluster and route; every endpoint set).
	LastConfigRoundMS float64 `json:"last_config_round_ms"`
	FullConfigMS      float64 `json:"full_config_ms"`
	FullEndpointsMS   float64 `json:"full_endpoints_ms"`
	// Resources counts the resources published, by type.
	Resources map[string]int `json:"resources"`
}

// Status returns the engine's status. Safe from any goroutine.
func (e *Engine) Status() EngineStatus {
	ms := func(ns int64) float64 { return float64(ns) / float64(time.Millisecond) }
	st := EngineStatus{
		Revision: e.seen.Load(), Changes: e.stats.changes.Load(),
		EndpointQueue: e.ep.len(), ConfigQueue: e.cfg.len(),
		EndpointRecomputes: e.stats.endpointRuns.Load(), ConfigRounds: e.stats.configRounds.Load(),
		LastConfigRoundMS: ms(e.stats.lastConfig.Load()), FullConfigMS: ms(e.stats.fullConfig.Load()),
		FullEndpointsMS: ms(e.stats.fullEndpoints.Load()), Resources: map[string]int{},
	}
	for _, t := range []xds.Type{xds.TypeCluster, xds.TypeEndpoint, xds.TypeListener, xds.TypeRoute} {
		st.Resources[t.String()] = e.cache.Len(t)
	}
	return st
}

// Status is the body of GET /v1/push/status.
type Status struct {
	Revision    int64                  `json:"revision"`
	Engine      EngineStatus           `json:"engine"`
	Subscribers []xds.SubscriberStatus `json:"subscribers"`
	// Warnings are problems in what is published that no write refused:
	// a Gateway server left out, a certificate missing or expired.
	Warnings []string `json:"warnings"`
}

// Warner is a publisher beside the engine whose problems push status
// shows (the ingress publisher).
type Warner interface {
	Warnings() []string
}

// StatusHandler serves push status as JSON (GET; ?node=ID keeps one
// node's streams): the engine's queues and timings, and every subscriber
// with its resources, versions sent and ACKed per type, pending updates and
// NACKs with the client's error text, and the warnings of each of warners.
// The server mounts it at /v1/push/status.
func StatusHandler(e *Engine, ads *xds.Server, warners ...Warner) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, `{"error":{"code":"invalid_argument","message":"use GET"}}`, http.StatusMethodNotAllowed)
			return
		}
		st := Status{Engine: e.Status(), Subscribers: ads.Status()}
		st.Revision = st.Engine.Revision
		if node := r.URL.Query().Get("node"); node != "" {
			kept := st.Subscribers[:0]
			for _, s := range st.Subscribers {
				if s.NodeID == node {
					kept = append(kept, s)
				}
			}
			st.Subscribers = kept
		}
		if st.Subscribers == nil {
			st.Subscribers = []xds.SubscriberStatus{}
		}
		st.Warnings = []string{}
		for _, wr := range warners {
			st.Warnings = append(st.Warnings, wr.Warnings()...)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Sextant-Revision", itoa(st.Revision))
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(st)
	})
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
