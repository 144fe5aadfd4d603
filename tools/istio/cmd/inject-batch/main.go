// Command inject-batch runs many `istioctl kube-inject` cases in one process, for the injection and
// template differentials of sidecar-inject (issue 21, items 2 and 3): starting the 150 MB istioctl once
// per case costs more than the injection itself.
//
// It follows istioctl's own path (istio.io/istio/istioctl/pkg/kubeinject, InjectCommand and
// setupKubeInjectParameters) with files in place of a cluster: the mesh through mesh.ApplyMeshConfigDefaults
// (what mesh.ReadMeshConfig does with --meshConfigFile), the injector config as readInjectConfigFile reads
// --injectConfigFile, the values text as --valuesFile gives it to inject.NewValuesConfig, the templates
// through inject.ParseTemplates, and the stream through inject.IntoResourceFile with an empty
// kubeinject.ExternalInjector, as istioctl has when --injectConfigFile is given. No Istio code is copied.
//
// Usage:
//
//	inject-batch chart-templates   print the chart's pod templates as a JSON object {name: text}
//	inject-batch                   read one JSON case a line on stdin, write one JSON result a line
//
// A case is {"id", "input", "values", "mesh", "config", "native"}: the texts of the -f stream,
// --valuesFile, --meshConfigFile and --injectConfigFile, and whether native sidecars are on (istioctl
// reads ENABLE_NATIVE_SIDECARS into features.EnableNativeSidecars once; here it is set per case). A result
// is {"id", "ok", "output", "error"}; a panic in Istio's code is reported as an error starting "panic:".
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	"istio.io/istio/istioctl/pkg/kubeinject"
	"istio.io/istio/manifests"
	"istio.io/istio/pilot/pkg/features"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/kube/inject"
	"istio.io/istio/pkg/log"
)

type request struct {
	ID     uint64 `json:"id"`
	Input  string `json:"input"`
	Values string `json:"values"`
	Mesh   string `json:"mesh"`
	Config string `json:"config"`
	Native bool   `json:"native"`
}

type response struct {
	ID     uint64 `json:"id"`
	OK     bool   `json:"ok"`
	Output string `json:"output"`
	Error  string `json:"error"`
}

// chartTemplates are the pod templates the istiod chart renders into the injector config
// (istiod-injector-configmap.yaml: `.Files.Get "files/<file>" | trim`).
var chartTemplates = map[string]string{
	"sidecar":     "files/injection-template.yaml",
	"gateway":     "files/gateway-injection-template.yaml",
	"grpc-simple": "files/grpc-simple.yaml",
	"grpc-agent":  "files/grpc-agent.yaml",
}

func printChartTemplates() error {
	out := map[string]string{}
	for name, file := range chartTemplates {
		b, err := manifests.FS.ReadFile("charts/istio-control/istio-discovery/" + file)
		if err != nil {
			return err
		}
		out[name] = strings.TrimSpace(string(b))
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	_, err = fmt.Println(string(b))
	return err
}

// readInjectConfig is what istioctl's readInjectConfigFile does with the file's bytes: an inject.Config
// with templates, or else the whole text as the sidecar template.
func readInjectConfig(f []byte) (inject.RawTemplates, error) {
	var injectConfig inject.Config
	err := yaml.Unmarshal(f, &injectConfig)
	if err != nil || len(injectConfig.RawTemplates) == 0 {
		return map[string]string{inject.SidecarTemplateName: string(f)}, nil
	}
	cfg, err := inject.UnmarshalConfig(f)
	if err != nil {
		return nil, err
	}
	return cfg.RawTemplates, nil
}

func run(req request) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	if req.Native {
		features.EnableNativeSidecars = features.NativeSidecarModeEnabled
	} else {
		features.EnableNativeSidecars = features.NativeSidecarModeDisabled
	}
	meshConfig, err := mesh.ApplyMeshConfigDefaults(req.Mesh)
	if err != nil {
		return "", err
	}
	raw, err := readInjectConfig([]byte(req.Config))
	if err != nil {
		return "", err
	}
	templs, err := inject.ParseTemplates(raw)
	if err != nil {
		return "", err
	}
	vc, err := inject.NewValuesConfig(req.Values)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	err = inject.IntoResourceFile(&kubeinject.ExternalInjector{}, templs, vc, "", meshConfig,
		strings.NewReader(req.Input), &buf, func(string) {})
	return buf.String(), err
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "chart-templates" {
		if err := printChartTemplates(); err != nil {
			fmt.Fprintln(os.Stderr, "inject-batch:", err)
			os.Exit(1)
		}
		return
	}
	// Istio's logger writes to stdout by default; stdout carries the results (istioctl kube-inject moves
	// its log to stderr the same way, in its PersistentPreRunE).
	opts := log.DefaultOptions()
	opts.OutputPaths = []string{"stderr"}
	opts.ErrorOutputPaths = []string{"stderr"}
	if err := log.Configure(opts); err != nil {
		fmt.Fprintln(os.Stderr, "inject-batch:", err)
		os.Exit(1)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	w := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(w)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "inject-batch: bad request:", err)
			os.Exit(2)
		}
		out, err := run(req)
		resp := response{ID: req.ID, OK: err == nil, Output: out}
		if err != nil {
			resp.Error = err.Error()
		}
		if err := enc.Encode(resp); err != nil {
			os.Exit(3)
		}
		if err := w.Flush(); err != nil {
			os.Exit(3)
		}
	}
}
