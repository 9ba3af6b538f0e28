package consulapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/instance"
)

// Consul's agents read service definitions from configuration files
// (-config-file) at their start and at a reload (/v1/agent/reload).
// --consul-config-file is the same for a server: each file's "service"
// (one definition) and "services" (a list), in Consul's JSON (HCL is not
// read), are registered on the agent's node as through
// /v1/agent/service/register, marked with the label consul-config-file;
// at a reload, those of the node no file defines any more are
// deregistered. The other members of an agent's configuration are not
// Sextant's and are ignored.

const labelConfigFile = "consul-config-file"

// configServices reads the service definitions of the configuration files.
func (a *API) configServices() ([]*Registration, error) {
	var out []*Registration
	for _, path := range a.opts.ConfigFiles {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("consulapi: config file: %w", err)
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue // an empty file, as Consul takes it
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(b, &top); err != nil {
			return nil, fmt.Errorf("consulapi: config file %s: Consul's JSON is read (not HCL): %w", path, err)
		}
		for k, raw := range top {
			var list []json.RawMessage
			switch normalize(k) {
			case "service":
				list = []json.RawMessage{raw}
			case "services":
				if err := json.Unmarshal(raw, &list); err != nil {
					return nil, fmt.Errorf("consulapi: config file %s: services: want a list: %w", path, err)
				}
			default:
				continue
			}
			for i, one := range list {
				reg, err := DecodeRegister(one)
				if err != nil {
					return nil, fmt.Errorf("consulapi: config file %s: %s[%d]: %w", path, k, i, err)
				}
				out = append(out, reg)
			}
		}
	}
	return out, nil
}

// LoadConfigFiles registers the services of the configuration files and
// deregisters those an earlier load registered that no file defines now.
func (a *API) LoadConfigFiles(ctx context.Context) error {
	if len(a.opts.ConfigFiles) == 0 {
		return nil
	}
	regs, err := a.configServices()
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	var batch []*instance.Instance
	for _, reg := range regs {
		if err := a.checkScripts(reg.Checks); err != nil {
			return fmt.Errorf("consulapi: config file: service %q: %w", reg.Name, err)
		}
		reg.Node = a.opts.Node
		reg.FromConfig = true
		in, err := reg.Instance(a.opts.Namespace, a.selfNode().Address)
		if err != nil {
			return fmt.Errorf("consulapi: config file: service %q: %w", reg.Name, err)
		}
		if keep[in.ID] {
			return fmt.Errorf("consulapi: config file: service id %q defined twice", in.ID)
		}
		keep[in.ID] = true
		batch = append(batch, in)
	}
	ns := a.opts.Namespace
	guard := func(cur *instance.Instance) error {
		if cur.Namespace != ns {
			return fmt.Errorf("consulapi: config file: id %q is an instance of namespace %q", cur.ID, cur.Namespace)
		}
		return nil
	}
	if len(batch) > 0 {
		if _, err := a.reg.RegisterGuarded(ctx, batch, guard); err != nil {
			return fmt.Errorf("consulapi: config file: %w", err)
		}
	}
	var gone []string
	for _, svc := range a.reg.Instances().Snapshot().Groups(ns) {
		for _, in := range svc.Items() {
			if _, ok := in.Metadata.Get(labelConfigFile); ok && a.nodeOf(in) == a.opts.Node && !keep[in.ID] {
				gone = append(gone, in.ID)
			}
		}
	}
	sort.Strings(gone)
	if len(gone) > 0 {
		if _, _, err := a.reg.DeregisterGuarded(ctx, gone, guard); err != nil {
			return fmt.Errorf("consulapi: config file: %w", err)
		}
	}
	a.log.Info("loaded the config files", "files", strings.Join(a.opts.ConfigFiles, ","), "services", len(batch), "removed", len(gone))
	return nil
}

// PUT /v1/agent/reload: the configuration files read again (their
// services; nothing else of Sextant's configuration reloads).
func (a *API) agentReload(w http.ResponseWriter, r *http.Request) error {
	if err := acl.Require(r, instancesWrite(a.opts.Namespace)); err != nil {
		return err
	}
	if err := a.LoadConfigFiles(r.Context()); err != nil {
		return &httpError{http.StatusInternalServerError, err.Error()}
	}
	return writeValue(w, "")
}
