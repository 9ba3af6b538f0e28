package consulapi

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
)

// Consul's script and Docker checks run a command on the agent's machine.
// Sextant's servers run no commands: with --consul-enable-script-checks
// (Consul's enable_script_checks; without it they are refused, as Consul
// refuses them) they are kept as records, with their definition, and
// answered with the status they were registered with (default critical,
// Consul's initial status). A service's are kept in its instance's label
// consul-script-checks (their JSON), a node's in the node's record; they
// count in Consul's health answers, not in Sextant's own health (DNS,
// xDS, healthy_only), which only the checks the server runs decide.

const labelScriptChecks = "consul-script-checks"

// scriptCheck is a kept script or Docker check.
type scriptCheck struct {
	ID, Name          string
	Notes             string   `json:",omitempty"`
	Type              string   // script or docker
	Args              []string `json:",omitempty"`
	DockerContainerID string   `json:",omitempty"`
	Shell             string   `json:",omitempty"`
	Interval          string   `json:",omitempty"`
	Timeout           string   `json:",omitempty"`
	Status            string
}

func isScript(d CheckDefinition) bool { return d.Type == "script" || d.Type == "docker" }

// errScriptsDisabled is Consul's refusal of a script check, with the flag
// that lifts it.
func errScriptsDisabled(path string) error {
	return badRequest(fmt.Sprintf("%s: Scripts are disabled on this agent (Consul's enable_script_checks): start the server with --consul-enable-script-checks to keep script and Docker checks (Sextant never runs them)", orBody(path)))
}

// checkScripts refuses defs' script checks unless they are enabled.
func (a *API) checkScripts(defs []CheckDefinition) error {
	if a.opts.EnableScriptChecks {
		return nil
	}
	for i, d := range defs {
		if isScript(d) {
			return errScriptsDisabled("Checks[" + strconv.Itoa(i) + "]")
		}
	}
	return nil
}

// defaultCheckIDs gives defs Consul's default ids and names, counted over
// every check of the service: service:<id> for a single check,
// service:<id>:N (from 1) for several.
func defaultCheckIDs(id, service string, defs []CheckDefinition) {
	for i := range defs {
		d := &defs[i]
		if d.ID == "" {
			d.ID = "service:" + id
			if len(defs) > 1 {
				d.ID += ":" + strconv.Itoa(i+1)
			}
		}
		if d.Name == "" {
			d.Name = "Service '" + service + "' check"
		}
	}
}

func toScriptCheck(d CheckDefinition) scriptCheck {
	c := scriptCheck{ID: d.ID, Name: d.Name, Notes: d.Notes, Type: d.Type, Args: d.Args, DockerContainerID: d.DockerContainerID,
		Shell: d.Shell, Status: d.Status}
	if d.Interval > 0 {
		c.Interval = d.Interval.String()
	}
	if d.Timeout > 0 {
		c.Timeout = d.Timeout.String()
	}
	if c.Status == "" {
		c.Status = instance.StatusCritical
	}
	return c
}

// putScriptChecks keeps the script checks of defs in m (none: no label).
func putScriptChecks(m map[string]string, defs []CheckDefinition) error {
	var list []scriptCheck
	for _, d := range defs {
		if isScript(d) {
			list = append(list, toScriptCheck(d))
		}
	}
	delete(m, labelScriptChecks)
	if len(list) == 0 {
		return nil
	}
	return putJSON(m, labelScriptChecks, "Checks (script and Docker checks)", list)
}

// scriptChecksOf are the script checks kept on in.
func scriptChecksOf(in *instance.Instance) []scriptCheck {
	v, ok := in.Metadata.Get(labelScriptChecks)
	if !ok {
		return nil
	}
	var list []scriptCheck
	if json.Unmarshal([]byte(v), &list) != nil {
		return nil
	}
	return list
}

// hasCheck reports whether in has check id, run or kept.
func hasCheck(in *instance.Instance, id string) bool {
	return in.Check(id) != nil || slices.ContainsFunc(scriptChecksOf(in), func(c scriptCheck) bool { return c.ID == id })
}

// nonScript are defs without their script checks (those the server runs
// or expects updates of).
func nonScript(defs []CheckDefinition) []CheckDefinition {
	return slices.DeleteFunc(slices.Clone(defs), isScript)
}

// setScriptCheck replaces in's kept script check id with def, or removes
// it (def nil); in is a clone of the stored instance.
func setScriptCheck(in *instance.Instance, id string, def *CheckDefinition) error {
	list := slices.DeleteFunc(scriptChecksOf(in), func(c scriptCheck) bool { return c.ID == id })
	if def != nil {
		list = append(list, toScriptCheck(*def))
	}
	m := in.Metadata.Map()
	delete(m, labelScriptChecks)
	if len(list) > 0 {
		if err := putJSON(m, labelScriptChecks, "Checks (script and Docker checks)", list); err != nil {
			return err
		}
	}
	in.Metadata = label.FromMap(m)
	return nil
}
