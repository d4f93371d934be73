package deploy

// These tests read the deployment files as text and YAML, with no cluster
// and no daemon: the Kubernetes manifests are complete and consistent with
// each other (kustomization, Secret and ConfigMap keys, labels, ports), the
// DaemonSet gives the daemon what it needs, and every FORKBOX_* variable
// named anywhere in deploy/ is one the daemon reads. The systemd unit's own
// checks (it starts `forkbox serve` with flags the binary takes, systemd
// reads it) are test/e2e's TestSystemdUnit.

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	k8sDir  = "kubernetes"
	cmdDir  = "../cmd/forkbox"
	dataDir = "/var/lib/forkbox"
)

// pendingEnv are the daemon's variables for many nodes, being added to
// cmd/forkbox as these files are written; a name is accepted when it is
// here or in cmd/forkbox's source.
var pendingEnv = []string{
	"FORKBOX_STORE", "FORKBOX_BLOBS", "FORKBOX_BLOB_CACHE_MB",
	"FORKBOX_NODE_ID", "FORKBOX_ADVERTISE", "FORKBOX_NODE_TIMEOUT", "FORKBOX_ON_NODE_LOST",
	"FORKBOX_API_KEY", "FORKBOX_ON_EXIT", "FORKBOX_PORTS_DOMAIN",
}

// pendingFlags are serve's flags for many nodes, likewise.
var pendingFlags = []string{"store", "blobs", "blob-cache-mb", "node-id", "advertise", "node-timeout", "on-node-lost"}

// doc is one YAML document of a manifest file.
type doc struct {
	file string
	n    int // 1-based index in the file
	m    map[string]any
	raw  []byte
}

func (d doc) String() string { return fmt.Sprintf("%s#%d", d.file, d.n) }

func (d doc) kind() string { s, _ := d.m["kind"].(string); return s }

func (d doc) name() string {
	md, _ := d.m["metadata"].(map[string]any)
	s, _ := md["name"].(string)
	return s
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// readDocs parses every YAML document of one file; documents holding only
// comments are left out.
func readDocs(t *testing.T, path string) []doc {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []doc
	for i, part := range docSep.Split(string(b), -1) {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(part), &m); err != nil {
			t.Fatalf("%s#%d: %v", path, i+1, err)
		}
		if m != nil {
			docs = append(docs, doc{file: filepath.Base(path), n: i + 1, m: m, raw: []byte(part)})
		}
	}
	return docs
}

// kustomization is the part of kustomization.yaml these tests read.
type kustomization struct {
	Namespace          string      `json:"namespace"`
	Resources          []string    `json:"resources"`
	ConfigMapGenerator []generator `json:"configMapGenerator"`
	SecretGenerator    []generator `json:"secretGenerator"`
}

type generator struct {
	Name     string   `json:"name"`
	Envs     []string `json:"envs"`
	Files    []string `json:"files"`
	Literals []string `json:"literals"`
}

// manifests is the kustomization and everything it makes.
type manifests struct {
	k    kustomization
	docs []doc // the resources' documents
	// keys of each ConfigMap and Secret by name, and values where known
	configMaps, secrets map[string]map[string]string
}

func loadManifests(t *testing.T) *manifests {
	t.Helper()
	kdocs := readDocs(t, filepath.Join(k8sDir, "kustomization.yaml"))
	if len(kdocs) != 1 {
		t.Fatalf("kustomization.yaml: %d documents, want 1", len(kdocs))
	}
	ms := &manifests{configMaps: map[string]map[string]string{}, secrets: map[string]map[string]string{}}
	if err := yaml.Unmarshal(kdocs[0].raw, &ms.k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	for _, r := range ms.k.Resources {
		if _, err := os.Stat(filepath.Join(k8sDir, r)); err != nil {
			t.Errorf("kustomization.yaml lists %s: %v", r, err)
			continue
		}
		ms.docs = append(ms.docs, readDocs(t, filepath.Join(k8sDir, r))...)
	}
	gen := func(into map[string]map[string]string, gs []generator, what string) {
		for _, g := range gs {
			vals := map[string]string{}
			for _, f := range append(slices.Clone(g.Envs), g.Files...) {
				path, ok := generatorSource(t, f)
				if !ok {
					t.Errorf("kustomization.yaml: %s %s reads %s, which is neither here nor made from %s.example", what, g.Name, f, f)
					continue
				}
				if slices.Contains(g.Envs, f) {
					for k, v := range readEnvFile(t, path) {
						vals[k] = v
					}
				} else {
					vals[filepath.Base(f)] = ""
				}
			}
			for _, l := range g.Literals {
				k, v, _ := strings.Cut(l, "=")
				vals[k] = v
			}
			into[g.Name] = vals
		}
	}
	gen(ms.configMaps, ms.k.ConfigMapGenerator, "configMapGenerator")
	gen(ms.secrets, ms.k.SecretGenerator, "secretGenerator")
	// Plain ConfigMaps and Secrets among the resources count too.
	for _, d := range ms.docs {
		var into map[string]map[string]string
		switch d.kind() {
		case "ConfigMap":
			into = ms.configMaps
		case "Secret":
			into = ms.secrets
		default:
			continue
		}
		vals := map[string]string{}
		for _, field := range []string{"data", "stringData", "binaryData"} {
			m, _ := d.m[field].(map[string]any)
			for k, v := range m {
				vals[k] = fmt.Sprint(v)
			}
		}
		into[d.name()] = vals
	}
	return ms
}

// generatorSource finds a generator's file: itself, or for a file holding
// secrets that the operator makes (ignored by git), its .example.
func generatorSource(t *testing.T, f string) (string, bool) {
	t.Helper()
	path := filepath.Join(k8sDir, f)
	if _, err := os.Stat(path + ".example"); err == nil {
		if !gitIgnored(t, f) {
			t.Errorf("%s is made from %s.example and holds secrets: list it in %s/.gitignore", f, f, k8sDir)
		}
		return path + ".example", true
	}
	if _, err := os.Stat(path); err == nil {
		return path, true
	}
	return "", false
}

func gitIgnored(t *testing.T, f string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(k8sDir, ".gitignore"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == f || strings.TrimSpace(line) == "/"+f {
			return true
		}
	}
	return false
}

var envLine = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=(.*)$`)

// readEnvFile reads KEY=VALUE lines (as kustomize's envs and systemd's
// EnvironmentFile take them); blank lines and # comments are skipped.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := envLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("%s:%d: not KEY=VALUE: %q", path, n, line)
			continue
		}
		if _, dup := vals[m[1]]; dup {
			t.Errorf("%s:%d: %s set twice", path, n, m[1])
		}
		vals[m[1]] = m[2]
	}
	return vals
}

func TestManifestFields(t *testing.T) {
	ms := loadManifests(t)
	if len(ms.docs) == 0 {
		t.Fatal("the kustomization makes nothing")
	}
	for _, d := range ms.docs {
		for _, f := range []string{"apiVersion", "kind"} {
			if s, _ := d.m[f].(string); s == "" {
				t.Errorf("%s: no %s", d, f)
			}
		}
		if d.name() == "" {
			t.Errorf("%s: no metadata.name", d)
		}
	}
	ns := 0
	for _, d := range ms.docs {
		if d.kind() == "Namespace" {
			ns++
			if d.name() != ms.k.Namespace {
				t.Errorf("%s: Namespace %q, but the kustomization puts everything in %q", d, d.name(), ms.k.Namespace)
			}
		}
	}
	if ms.k.Namespace == "" || ns != 1 {
		t.Errorf("want one Namespace and the kustomization's namespace set to it; namespace %q, %d Namespaces", ms.k.Namespace, ns)
	}
}

// TestKustomizationFiles: the kustomization uses every file of the
// directory and only files that are there.
func TestKustomizationFiles(t *testing.T) {
	ms := loadManifests(t)
	used := map[string]bool{"kustomization.yaml": true, ".gitignore": true}
	for _, r := range ms.k.Resources {
		used[r] = true
	}
	for _, g := range append(slices.Clone(ms.k.ConfigMapGenerator), ms.k.SecretGenerator...) {
		for _, f := range append(slices.Clone(g.Envs), g.Files...) {
			used[f], used[f+".example"] = true, true
		}
	}
	entries, err := os.ReadDir(k8sDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !used[e.Name()] {
			t.Errorf("%s/%s is in no resources or generator of kustomization.yaml", k8sDir, e.Name())
		}
	}
}

// podSpec and the rest are the parts of Kubernetes' types these tests read.
type podSpec struct {
	HostNetwork                   bool              `json:"hostNetwork"`
	HostPID                       bool              `json:"hostPID"`
	DNSPolicy                     string            `json:"dnsPolicy"`
	NodeSelector                  map[string]string `json:"nodeSelector"`
	TerminationGracePeriodSeconds *int64            `json:"terminationGracePeriodSeconds"`
	Containers                    []container       `json:"containers"`
	Volumes                       []struct {
		Name     string `json:"name"`
		HostPath *struct {
			Path string `json:"path"`
		} `json:"hostPath"`
	} `json:"volumes"`
}

type container struct {
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	Command []string `json:"command"`
	Args    []string `json:"args"`
	Ports   []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	} `json:"ports"`
	Env []struct {
		Name      string `json:"name"`
		Value     string `json:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `json:"fieldPath"`
			} `json:"fieldRef"`
			SecretKeyRef    *keyRef `json:"secretKeyRef"`
			ConfigMapKeyRef *keyRef `json:"configMapKeyRef"`
		} `json:"valueFrom"`
	} `json:"env"`
	EnvFrom []struct {
		Prefix       string `json:"prefix"`
		ConfigMapRef *struct {
			Name string `json:"name"`
		} `json:"configMapRef"`
		SecretRef *struct {
			Name string `json:"name"`
		} `json:"secretRef"`
	} `json:"envFrom"`
	SecurityContext *struct {
		Privileged *bool `json:"privileged"`
	} `json:"securityContext"`
	StartupProbe   *probe `json:"startupProbe"`
	ReadinessProbe *probe `json:"readinessProbe"`
	LivenessProbe  *probe `json:"livenessProbe"`
	Resources      struct {
		Requests map[string]any `json:"requests"`
	} `json:"resources"`
	VolumeMounts []struct {
		Name             string `json:"name"`
		MountPath        string `json:"mountPath"`
		MountPropagation string `json:"mountPropagation"`
	} `json:"volumeMounts"`
}

type keyRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

type probe struct {
	HTTPGet *struct {
		Path string `json:"path"`
		Port any    `json:"port"` // a number or a port's name
	} `json:"httpGet"`
}

type daemonSet struct {
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Spec podSpec `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

func (ms *manifests) daemonSet(t *testing.T) (*daemonSet, container) {
	t.Helper()
	var found []doc
	for _, d := range ms.docs {
		if d.kind() == "DaemonSet" {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d DaemonSets, want 1", len(found))
	}
	var ds daemonSet
	if err := yaml.Unmarshal(found[0].raw, &ds); err != nil {
		t.Fatalf("%s: %v", found[0], err)
	}
	cs := ds.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("the DaemonSet has %d containers, want the daemon alone", len(cs))
	}
	return &ds, cs[0]
}

// portOf resolves a probe's or a Service's port (a number or a name) to a
// declared container port, 0 when it is none.
func portOf(c container, p any) int {
	for _, cp := range c.Ports {
		switch v := p.(type) {
		case string:
			if v == cp.Name {
				return cp.ContainerPort
			}
			if n, err := strconv.Atoi(v); err == nil && n == cp.ContainerPort {
				return n
			}
		case float64:
			if int(v) == cp.ContainerPort {
				return cp.ContainerPort
			}
		}
	}
	return 0
}

// envSource is where a container's variable comes from.
type envSource struct {
	kind  string // "Secret", "ConfigMap", "fieldRef", "value"
	from  string // the object's name or the field's path
	value string // the value where known
}

// resolveEnv is the container's environment: envFrom's objects' keys,
// then env, which wins. Every reference must name an object and key the
// manifests make.
func (ms *manifests) resolveEnv(t *testing.T, c container) map[string]envSource {
	t.Helper()
	env := map[string]envSource{}
	lookup := func(kind, name string) map[string]string {
		objs := ms.configMaps
		if kind == "Secret" {
			objs = ms.secrets
		}
		keys, ok := objs[name]
		if !ok {
			t.Errorf("the daemon's environment refers to %s %q, which the kustomization does not make", kind, name)
		}
		return keys
	}
	for _, ef := range c.EnvFrom {
		kind, name := "ConfigMap", ""
		switch {
		case ef.ConfigMapRef != nil:
			name = ef.ConfigMapRef.Name
		case ef.SecretRef != nil:
			kind, name = "Secret", ef.SecretRef.Name
		default:
			t.Errorf("envFrom entry with neither configMapRef nor secretRef")
			continue
		}
		for k, v := range lookup(kind, name) {
			env[ef.Prefix+k] = envSource{kind: kind, from: name, value: v}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = envSource{kind: "value", value: e.Value}
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = envSource{kind: "fieldRef", from: e.ValueFrom.FieldRef.FieldPath}
		case e.ValueFrom.SecretKeyRef != nil, e.ValueFrom.ConfigMapKeyRef != nil:
			kind, ref := "Secret", e.ValueFrom.SecretKeyRef
			if ref == nil {
				kind, ref = "ConfigMap", e.ValueFrom.ConfigMapKeyRef
			}
			keys := lookup(kind, ref.Name)
			v, ok := keys[ref.Key]
			if keys != nil && !ok {
				t.Errorf("env %s: %s %s has no key %q", e.Name, kind, ref.Name, ref.Key)
			}
			env[e.Name] = envSource{kind: kind, from: ref.Name, value: v}
		default:
			t.Errorf("env %s: a valueFrom these tests do not know", e.Name)
		}
	}
	return env
}

func TestDaemonSet(t *testing.T) {
	ms := loadManifests(t)
	ds, c := ms.daemonSet(t)
	pod := ds.Spec.Template.Spec

	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("the daemon's container must be privileged (namespaces, cgroups, overlayfs, nftables, CRIU)")
	}
	if len(pod.NodeSelector) == 0 {
		t.Error("no nodeSelector: operators choose the nodes that run sandboxes by a label")
	}
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds < 60 {
		t.Error("terminationGracePeriodSeconds must leave time to suspend sessions (at least 60 s)")
	}
	if len(c.Resources.Requests) == 0 {
		t.Error("no resource requests")
	}
	if len(c.Command) == 0 || c.Command[0] != "/usr/local/bin/forkbox" || len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Errorf("command %q args %q: want /usr/local/bin/forkbox serve … (where `make install` puts it)", c.Command, c.Args)
	}

	// Flags: serve takes them, and they say where data and the API are.
	flags := knownFlags(t)
	args := map[string]string{}
	for i := 1; i < len(c.Args); i++ {
		a := c.Args[i]
		if !strings.HasPrefix(a, "--") {
			t.Errorf("argument %q is not a flag", a)
			continue
		}
		name, val, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok && i+1 < len(c.Args) && !strings.HasPrefix(c.Args[i+1], "--") {
			val, i = c.Args[i+1], i+1
		}
		if !flags[name] {
			t.Errorf("the DaemonSet passes --%s, which forkbox serve does not take", name)
		}
		args[name] = val
	}
	if args["data-dir"] != dataDir {
		t.Errorf("--data-dir=%q, want %s", args["data-dir"], dataDir)
	}

	// The data dir is the node's, so sandboxes and their state outlive the pod.
	hostPaths := map[string]string{} // volume → host path
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounts := map[string]string{} // mount path → host path
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = hostPaths[m.Name]
		if m.MountPath == dataDir && m.MountPropagation != "Bidirectional" {
			t.Errorf("%s is mounted with propagation %q: the daemon's mounts there must outlive the pod (Bidirectional)", dataDir, m.MountPropagation)
		}
	}
	if mounts[dataDir] != dataDir {
		t.Errorf("%s is not the host's %s (a hostPath volume)", dataDir, dataDir)
	}

	// The port: --listen, the probes and the Service agree on it.
	if len(c.Ports) == 0 {
		t.Fatal("the daemon's container declares no port")
	}
	_, lport, _ := strings.Cut(args["listen"], ":")
	if n, _ := strconv.Atoi(lport); portOf(c, float64(n)) == 0 {
		t.Errorf("--listen=%q is not on a declared container port", args["listen"])
	}
	for what, p := range map[string]*probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
		if p == nil {
			if what != "startup" {
				t.Errorf("no %s probe", what)
			}
			continue
		}
		if p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || portOf(c, p.HTTPGet.Port) == 0 {
			t.Errorf("the %s probe must GET /healthz (the one route needing no key) at the container's port: %+v", what, p.HTTPGet)
		}
	}

	// The environment.
	env := ms.resolveEnv(t, c)
	for _, name := range []string{"FORKBOX_STORE", "FORKBOX_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if src, ok := env[name]; !ok {
			t.Errorf("the daemon gets no %s", name)
		} else if src.kind != "Secret" {
			t.Errorf("%s comes from a %s, not a Secret", name, src.kind)
		}
	}
	if !strings.HasPrefix(env["FORKBOX_STORE"].value, "postgres://") {
		t.Errorf("FORKBOX_STORE=%q: want the shared PostgreSQL store (postgres://…)", env["FORKBOX_STORE"].value)
	}
	if src, ok := env["FORKBOX_BLOBS"]; !ok || !strings.HasPrefix(src.value, "s3://") {
		t.Errorf("FORKBOX_BLOBS=%q (%s): want the shared bucket (s3://…)", src.value, src.kind)
	}
	if src := env["FORKBOX_NODE_ID"]; src.kind != "fieldRef" || src.from != "spec.nodeName" {
		t.Errorf("FORKBOX_NODE_ID must be the node's name (fieldRef spec.nodeName), is %+v", src)
	}
	adv := env["FORKBOX_ADVERTISE"]
	if adv.kind == "value" {
		m := regexp.MustCompile(`^https?://\$\(([A-Za-z_][A-Za-z0-9_]*)\):([0-9]+)$`).FindStringSubmatch(adv.value)
		if m == nil || env[m[1]].kind != "fieldRef" || env[m[1]].from != "status.podIP" || !definedBefore(c, m[1], "FORKBOX_ADVERTISE") {
			t.Errorf("FORKBOX_ADVERTISE=%q: want http://$(V):PORT, V set before it from status.podIP", adv.value)
		} else if n, _ := strconv.Atoi(m[2]); portOf(c, float64(n)) == 0 {
			t.Errorf("FORKBOX_ADVERTISE=%q is not on a declared container port", adv.value)
		}
	} else {
		t.Errorf("FORKBOX_ADVERTISE must be http://$(POD_IP):PORT (the downward API's status.podIP), is %+v", adv)
	}
	if strings.Contains(args["listen"], "$(") {
		v := strings.TrimSuffix(strings.TrimPrefix(strings.Split(args["listen"], ":")[0], "$("), ")")
		if env[v].kind != "fieldRef" {
			t.Errorf("--listen=%s: %s is not set from the downward API", args["listen"], v)
		}
	}

	// keep under Kubernetes: what lets sandboxes outlive the pod.
	if onExit := env["FORKBOX_ON_EXIT"].value; onExit != "keep" {
		t.Errorf("FORKBOX_ON_EXIT=%q, want keep: the pod's restarts and upgrades leave sandboxes running", onExit)
	} else {
		if !pod.HostPID {
			t.Error("keep needs hostPID: in a PID namespace of its own the daemon is PID 1 and the kernel kills every sandbox with it")
		}
		if !pod.HostNetwork {
			t.Error("keep needs hostNetwork: sandboxes' veth pairs would die with the pod's network namespace")
		}
		if mounts["/sys/fs/cgroup"] != "/sys/fs/cgroup" {
			t.Error("keep needs the host's /sys/fs/cgroup: sandboxes' cgroups must be outside the pod's")
		}
		if mounts["/run/forkbox"] != "/run/forkbox" {
			t.Error("keep needs the host's /run/forkbox: the runtimes' exec roots outlive the pod")
		}
	}
	if pod.HostNetwork && pod.DNSPolicy != "ClusterFirstWithHostNet" {
		t.Errorf("hostNetwork with dnsPolicy %q: the daemon could not resolve in-cluster names (ClusterFirstWithHostNet)", pod.DNSPolicy)
	}

	// The DaemonSet's selector selects its own pods.
	if !selects(ds.Spec.Selector.MatchLabels, ds.Spec.Template.Metadata.Labels) {
		t.Errorf("the DaemonSet's selector %v does not match its pods' labels %v", ds.Spec.Selector.MatchLabels, ds.Spec.Template.Metadata.Labels)
	}
}

// definedBefore reports whether env var v is set in c.Env before name
// ($(v) in a value expands only then).
func definedBefore(c container, v, name string) bool {
	for _, e := range c.Env {
		if e.Name == name {
			return false
		}
		if e.Name == v {
			return true
		}
	}
	return false
}

// selects reports whether a (non-empty) selector matches labels.
func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestService(t *testing.T) {
	ms := loadManifests(t)
	ds, c := ms.daemonSet(t)
	n := 0
	for _, d := range ms.docs {
		if d.kind() != "Service" {
			continue
		}
		n++
		var svc struct {
			Spec struct {
				Type     string            `json:"type"`
				Selector map[string]string `json:"selector"`
				Ports    []struct {
					Port       int `json:"port"`
					TargetPort any `json:"targetPort"`
				} `json:"ports"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(d.raw, &svc); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		if !selects(svc.Spec.Selector, ds.Spec.Template.Metadata.Labels) {
			t.Errorf("%s: selector %v does not match the DaemonSet's pods' labels %v", d, svc.Spec.Selector, ds.Spec.Template.Metadata.Labels)
		}
		if len(svc.Spec.Ports) == 0 {
			t.Errorf("%s: no ports", d)
		}
		for _, p := range svc.Spec.Ports {
			target := p.TargetPort
			if target == nil {
				target = float64(p.Port)
			}
			if portOf(c, target) == 0 {
				t.Errorf("%s: targetPort %v is no port the daemon's container declares", d, target)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d Services, want 1", n)
	}
}

// knownEnv is every FORKBOX_* variable cmd/forkbox's source names, and
// pendingEnv.
func knownEnv(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	inSource := map[string]bool{}
	re := regexp.MustCompile(`"(FORKBOX_[A-Z0-9_]+)"`)
	for _, src := range cmdSources(t) {
		for _, m := range re.FindAllStringSubmatch(src, -1) {
			known[m[1]], inSource[m[1]] = true, true
		}
	}
	if len(known) == 0 {
		t.Fatalf("no \"FORKBOX_…\" literal in %s/*.go: has the daemon moved?", cmdDir)
	}
	var notYet []string
	for _, name := range pendingEnv {
		known[name] = true
		if !inSource[name] {
			notYet = append(notYet, name)
		}
	}
	if len(notYet) > 0 {
		t.Logf("accepted though not yet in %s: %s", cmdDir, strings.Join(notYet, " "))
	}
	return known
}

// knownFlags is every "name" literal of cmd/forkbox's source (a superset
// of serve's flags, good enough to catch a typo), and pendingFlags.
func knownFlags(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	re := regexp.MustCompile(`"([a-z][a-z0-9-]*)"`)
	for _, src := range cmdSources(t) {
		for _, m := range re.FindAllStringSubmatch(src, -1) {
			known[m[1]] = true
		}
	}
	for _, f := range pendingFlags {
		known[f] = true
	}
	return known
}

func cmdSources(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cmdDir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go source in %s: %v", cmdDir, err)
	}
	var srcs []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, string(b))
	}
	return srcs
}

// TestEnvNames: every FORKBOX_* name in deploy/ (manifests, env files, the
// systemd unit, the README, comments included) is one the daemon reads.
func TestEnvNames(t *testing.T) {
	known := knownEnv(t)
	re := regexp.MustCompile(`FORKBOX_[A-Z0-9_]*[A-Z0-9]`)
	seen := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for n, line := range strings.Split(string(b), "\n") {
			for _, name := range re.FindAllString(line, -1) {
				seen++
				if !known[name] {
					t.Errorf("deploy/%s:%d: %s is no variable forkbox reads", path, n+1, name)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen == 0 {
		t.Fatal("no FORKBOX_ name anywhere in deploy/")
	}
}

// TestSystemdEnvExample: the example EnvironmentFile is KEY=VALUE lines and
// sets what many nodes need.
func TestSystemdEnvExample(t *testing.T) {
	vals := readEnvFile(t, "forkbox.env.example")
	var missing []string
	for _, name := range []string{"FORKBOX_API_KEY", "FORKBOX_STORE", "FORKBOX_BLOBS", "FORKBOX_ADVERTISE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if _, ok := vals[name]; !ok {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("forkbox.env.example does not set %s", strings.Join(missing, " "))
	}
	for k, v := range vals {
		if strings.HasPrefix(v, `"`) != strings.HasSuffix(v, `"`) {
			t.Errorf("forkbox.env.example: %s=%s: unbalanced quotes", k, v)
		}
	}
}

// TestKustomizeBuild builds the manifests as `kubectl apply -k` would
// (secrets.env made from its example), when kubectl is here: every object
// lands in the namespace, and the DaemonSet refers to the generated
// ConfigMap and Secret by their hashed names.
func TestKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("no kubectl on PATH")
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(k8sDir)); err != nil {
		t.Fatal(err)
	}
	examples, _ := filepath.Glob(filepath.Join(dir, "*.example"))
	for _, ex := range examples {
		b, err := os.ReadFile(ex)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(strings.TrimSuffix(ex, ".example"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(kubectl, "kustomize", dir).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, out)
	}
	path := filepath.Join(t.TempDir(), "built.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	names := map[string]string{} // kind → name
	var ns string
	for _, d := range readDocs(t, path) {
		names[d.kind()] = d.name()
		md, _ := d.m["metadata"].(map[string]any)
		if got, _ := md["namespace"].(string); d.kind() != "Namespace" && got == "" {
			t.Errorf("%s %s has no namespace", d.kind(), d.name())
		} else if d.kind() == "Namespace" {
			ns = d.name()
		} else if got != ns && ns != "" {
			t.Errorf("%s %s is in namespace %q, not %q", d.kind(), d.name(), got, ns)
		}
	}
	for _, kind := range []string{"Namespace", "ConfigMap", "Secret", "DaemonSet", "Service"} {
		if names[kind] == "" {
			t.Errorf("the build makes no %s", kind)
		}
	}
	// Each name appears in its object and in the DaemonSet's envFrom.
	if bytes.Count(out, []byte("name: "+names["ConfigMap"]+"\n")) < 2 || bytes.Count(out, []byte("name: "+names["Secret"]+"\n")) < 2 {
		t.Errorf("the DaemonSet does not refer to the generated ConfigMap %s and Secret %s", names["ConfigMap"], names["Secret"])
	}
}
