package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/sextant-mesh/sextant/internal/manifest"
)

// checkFlag checks one --name=value argument against fs without setting it
// (the command's flags are the process's: other tests parse them).
func checkFlag(fs *pflag.FlagSet, arg string) error {
	name, value, hasValue := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
	if !strings.HasPrefix(arg, "--") {
		return fmt.Errorf("want --name=value")
	}
	f := fs.Lookup(name)
	if f == nil {
		return fmt.Errorf("no such flag")
	}
	switch f.Value.Type() {
	case "bool":
		if hasValue {
			_, err := strconv.ParseBool(value)
			return err
		}
	case "duration":
		_, err := time.ParseDuration(value)
		return err
	case "int":
		_, err := strconv.Atoi(value)
		return err
	default:
		if !hasValue {
			return fmt.Errorf("no value")
		}
	}
	return nil
}

// TestDeployManifestArgs: every container of deploy/kubernetes/ runs a
// sextant command with flags that command has, valued as it parses them
// (internal/kube's TestDeployManifests checks the manifests against a real
// API server; this, against the binary's own flags).
func TestDeployManifestArgs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "deploy", "kubernetes", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob(filepath.Join("..", "..", "deploy", "kubernetes", "*", "*.yaml"))
	files = append(files, more...)
	containers := 0
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range manifest.Split(data) {
			js, err := d.JSON()
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			var obj struct {
				Kind string
				Spec struct {
					Template struct {
						Spec struct {
							Containers []struct {
								Name string
								Args []string
							}
						}
					}
				}
			}
			if err := json.Unmarshal(js, &obj); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			for _, c := range obj.Spec.Template.Spec.Containers {
				containers++
				if len(c.Args) == 0 {
					t.Errorf("%s: container %s has no args", path, c.Name)
					continue
				}
				cmd, rest, err := rootCmd.Find(c.Args[:1])
				if err != nil || cmd == rootCmd || len(rest) != 0 {
					t.Errorf("%s: container %s: %q is not a sextant command", path, c.Name, c.Args[0])
					continue
				}
				for _, a := range c.Args[1:] {
					if err := checkFlag(cmd.Flags(), a); err != nil {
						t.Errorf("%s: container %s: sextant %s %s: %v", path, c.Name, c.Args[0], a, err)
					}
				}
			}
		}
	}
	if containers < 3 {
		t.Errorf("%d containers in deploy/kubernetes/: want the server's two forms and the gateway", containers)
	}
}

type fixedSource bool

func (f fixedSource) Synced() bool { return bool(f) }

// TestBoundedSource: a Kubernetes source counts as synced for /readyz once
// synced, or once --kube-ready-timeout has passed; with 0, never before.
func TestBoundedSource(t *testing.T) {
	past, future := time.Now().Add(-time.Second), time.Now().Add(time.Hour)
	for _, c := range []struct {
		src      fixedSource
		deadline time.Time
		want     bool
	}{
		{true, time.Time{}, true},
		{false, time.Time{}, false},
		{false, future, false},
		{false, past, true},
	} {
		if got := (boundedSource{c.src, c.deadline}).Synced(); got != c.want {
			t.Errorf("synced %v, deadline %v: %v, want %v", c.src, c.deadline, got, c.want)
		}
	}
}
