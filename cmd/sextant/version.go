package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set at build time, e.g. go build -ldflags "-X main.version=v0.3.0
// -X main.gitCommit=$(git rev-parse --short HEAD)" (the Makefile does).
// Otherwise they come from the module and VCS data Go embeds.
var (
	version   = ""
	gitCommit = ""
)

// buildInfo is what "sextant version" prints.
type buildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

func readBuildInfo() buildInfo {
	bi := buildInfo{Version: version, Commit: gitCommit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if ok {
		if bi.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			bi.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				if bi.Commit == "" {
					bi.Commit = s.Value
					if len(bi.Commit) > 12 {
						bi.Commit = bi.Commit[:12]
					}
				}
			case "vcs.modified":
				bi.Modified = bi.Modified || s.Value == "true"
			}
		}
	}
	if bi.Version == "" {
		bi.Version = "devel"
	}
	if bi.Commit == "" {
		bi.Commit = "unknown"
	}
	return bi
}

func (b buildInfo) String() string {
	dirty := ""
	if b.Modified {
		dirty = " (modified)"
	}
	return fmt.Sprintf("sextant %s, commit %s%s, %s %s", b.Version, b.Commit, dirty, b.GoVersion, b.Platform)
}

func init() {
	rootCmd.Version = readBuildInfo().String()
	rootCmd.SetVersionTemplate("{{.Version}}\n")
	rootCmd.AddCommand(newVersionCmd())
}

func newVersionCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version of this binary",
		Long: `Print the version, the commit it was built from and the Go version that
built it (also "sextant --version"). -o json prints them as one object.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bi := readBuildInfo()
			switch output {
			case "json":
				return writeJSON(cmd.OutOrStdout(), bi)
			case "text", "table":
				_, err := fmt.Fprintln(cmd.OutOrStdout(), bi)
				return err
			}
			return fmt.Errorf("unknown --output %q: use text or json", output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
