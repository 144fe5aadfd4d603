// Command inject-webhook serves Istio's own sidecar injection webhook handler, the one istiod serves on
// its webhook port, for the webhook benchmark of sidecar-inject (bench/istio-webhook.sh, issue 21 item 6).
//
// istiod itself (istio.io/istio/pilot/cmd/pilot-discovery) cannot be built from the Go module proxy: its
// pilot/pkg/bootstrap imports github.com/agentgateway/agentgateway/api, of which the proxy serves no
// version. This program runs the part of istiod that answers /inject, as istiod's
// Server.initSidecarInjector (pilot/pkg/bootstrap/sidecarinjector.go) sets it up when the injection
// files exist: inject.NewFileWatcher on the `config` and `values` files, inject.NewWebhook with the
// server's HTTPS mux, an Environment whose mesh is the --meshConfigFile (mesh.ReadMeshConfig, as istiod
// reads its mesh file) and whose push context has the (empty) ProxyConfig resources, served over TLS with
// the given certificate as istiod's httpsServer does. No Istio code is copied. Native sidecars are off
// (ENABLE_NATIVE_SIDECARS=false): istiod's node informer needs its multicluster controller.
//
// Usage:
//
//	inject-webhook --config FILE --values FILE --mesh FILE --cert FILE --key FILE [--addr :15017]
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"net/http"
	"os"

	"istio.io/istio/pilot/pkg/features"
	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/config/mesh/meshwatcher"
	"istio.io/istio/pkg/kube/inject"
)

func main() {
	config := flag.String("config", "", "the injection config (the ConfigMap's `config` key)")
	values := flag.String("values", "", "the injection values (the ConfigMap's `values` key)")
	meshFile := flag.String("mesh", "", "the mesh config")
	cert := flag.String("cert", "", "TLS certificate chain (PEM)")
	key := flag.String("key", "", "TLS private key (PEM)")
	addr := flag.String("addr", ":15017", "listen address")
	flag.Parse()
	if err := run(*config, *values, *meshFile, *cert, *key, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "inject-webhook:", err)
		os.Exit(1)
	}
}

func run(config, values, meshFile, cert, key, addr string) error {
	features.EnableNativeSidecars = features.NativeSidecarModeDisabled
	meshConfig, err := mesh.ReadMeshConfig(meshFile)
	if err != nil {
		return err
	}
	env := model.NewEnvironment()
	env.Watcher = meshwatcher.NewTestWatcher(meshConfig)
	push := model.NewPushContext()
	push.ProxyConfigs = &model.ProxyConfigs{}
	env.SetPushContext(push)
	watcher, err := inject.NewFileWatcher(config, values)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	wh, err := inject.NewWebhook(inject.WebhookParameters{Watcher: watcher, Env: env, Mux: mux, Revision: "default"})
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	wh.Run(stop)
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Addr:      addr,
		Handler:   mux,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
	}
	fmt.Fprintln(os.Stderr, "inject-webhook: serving /inject on", addr)
	return srv.ListenAndServeTLS("", "")
}
