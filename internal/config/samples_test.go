package config_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/manifest"
)

// istioModule is the istio.io/istio version whose samples/ folder
// TestIstioSamples applies. It is read from the module cache (go mod
// download fetches it from the module proxy once); it is not a dependency
// of Sextant's module.
const istioModule = "istio.io/istio@v0.0.0-20260827124520-eed52ebb66ad"

// samplesNotYet are the sample files that do not apply yet, each with why.
// The test fails when one of them applies (take it off the list) and when
// a file not on it fails: the list only shrinks.
var samplesNotYet = map[string]string{}

// placeholder finds what a sample leaves for the user to fill in: a shell
// variable ($CREDENTIAL_NAME) or a Go template action ({{.Revision}}).
var placeholder = regexp.MustCompile(`\$[A-Z_][A-Z0-9_]*|\{\{[^}]*\}\}`)

// TestIstioSamples applies, through the decoder and validator that
// "sextant config apply" uses, every file of Istio's samples/ that holds a
// networking.istio.io, security.istio.io or telemetry.istio.io object (its other documents,
// Deployments and Services, are Kubernetes' and left out). A file holding
// an EnvoyFilter, or a placeholder left for the user, must be refused with
// an error naming it; every other file must apply. Run with -v for the
// count.
func TestIstioSamples(t *testing.T) {
	if testing.Short() {
		t.Skip("reads istio.io/istio from the module cache")
	}
	dir := istioSamples(t)
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		ext := filepath.Ext(strings.TrimSuffix(path, ".tmpl"))
		if !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var total, applied, refused int
	var failed []string
	for _, path := range files {
		rel, _ := filepath.Rel(dir, path)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		istio, kinds := istioDocuments(data)
		if len(istio) == 0 {
			continue
		}
		total++
		_, err = config.Decode(istio)
		wantRefused := ""
		if slices.Contains(kinds, "EnvoyFilter") {
			wantRefused = "EnvoyFilter"
		} else if p := placeholder.Find(istio); p != nil {
			wantRefused = string(p)
		}
		switch {
		case wantRefused != "":
			refused++
			if err == nil {
				t.Errorf("%s: applied; want it refused for %s", rel, wantRefused)
			} else if !strings.Contains(err.Error(), wantRefused) {
				t.Errorf("%s: refused without naming %s:\n%v", rel, wantRefused, err)
			} else {
				t.Logf("%s: refused, as it must be: %v", rel, err)
			}
		case err == nil:
			applied++
			if why, ok := samplesNotYet[rel]; ok {
				t.Errorf("%s: applies now; take it off samplesNotYet (%s)", rel, why)
			}
		default:
			failed = append(failed, rel)
			if why, ok := samplesNotYet[rel]; ok {
				t.Logf("%s: not yet (%s): %v", rel, why, err)
			} else {
				t.Errorf("%s: %v", rel, err)
			}
			var fe config.Errors
			if !errors.As(err, &fe) {
				t.Errorf("%s: the error is not a config.Errors: %T", rel, err)
			}
		}
	}
	t.Logf("Istio samples (%s): %d files hold Istio objects; %d apply, %d refused as they must be (EnvoyFilter, placeholders), %d fail: %v",
		istioModule, total, applied, refused, len(failed), failed)
	if total < 30 {
		t.Errorf("only %d sample files hold Istio objects; the module's samples/ moved?", total)
	}
}

// istioDocuments returns the documents of a stream whose apiVersion is of
// networking.istio.io, security.istio.io or telemetry.istio.io, as one
// stream, and their kinds.
func istioDocuments(data []byte) ([]byte, []string) {
	var out bytes.Buffer
	var kinds []string
	for _, d := range manifest.Split(data) {
		js, err := d.JSON()
		if err != nil {
			continue
		}
		var head struct{ APIVersion, Kind string }
		if json.Unmarshal(js, &head) != nil {
			continue
		}
		if !strings.HasPrefix(head.APIVersion, "networking.istio.io/") && !strings.HasPrefix(head.APIVersion, "security.istio.io/") &&
			!strings.HasPrefix(head.APIVersion, "telemetry.istio.io/") {
			continue
		}
		out.WriteString("---\n")
		out.Write(d.Data)
		out.WriteString("\n")
		kinds = append(kinds, head.Kind)
	}
	return out.Bytes(), kinds
}

// istioSamples returns the samples/ folder of istioModule, downloading the
// module into the module cache if it is not there. It runs outside this
// module so that nothing is added to its go.mod or go.sum.
func istioSamples(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", istioModule)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GO111MODULE=on", "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s (the module proxy or the module cache is needed): %v\n%s", istioModule, err, out)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s: %s", istioModule, out)
	}
	return filepath.Join(mod.Dir, "samples")
}
