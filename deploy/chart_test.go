//go:build deploycheck

package deploy

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The parts of the Kubernetes objects the tests read.
type (
	meta struct {
		Name        string            `json:"name"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	}
	labelSelector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	}
	probe struct {
		HTTPGet *struct {
			Path string `json:"path"`
			Port any    `json:"port"` // a name or a number
		} `json:"httpGet"`
	}
	securityContext struct {
		RunAsNonRoot             *bool  `json:"runAsNonRoot"`
		RunAsUser                *int64 `json:"runAsUser"`
		ReadOnlyRootFilesystem   *bool  `json:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool  `json:"allowPrivilegeEscalation"`
		Privileged               *bool  `json:"privileged"`
		Capabilities             *struct {
			Add  []string `json:"add"`
			Drop []string `json:"drop"`
		} `json:"capabilities"`
		SeccompProfile *struct {
			Type string `json:"type"`
		} `json:"seccompProfile"`
	}
	container struct {
		Name  string   `json:"name"`
		Image string   `json:"image"`
		Args  []string `json:"args"`
		Env   []struct {
			Name      string `json:"name"`
			Value     string `json:"value"`
			ValueFrom *struct {
				FieldRef *struct {
					FieldPath string `json:"fieldPath"`
				} `json:"fieldRef"`
			} `json:"valueFrom"`
		} `json:"env"`
		Ports []struct {
			Name          string `json:"name"`
			ContainerPort int    `json:"containerPort"`
		} `json:"ports"`
		StartupProbe    *probe           `json:"startupProbe"`
		LivenessProbe   *probe           `json:"livenessProbe"`
		ReadinessProbe  *probe           `json:"readinessProbe"`
		SecurityContext *securityContext `json:"securityContext"`
		VolumeMounts    []struct {
			Name      string `json:"name"`
			MountPath string `json:"mountPath"`
			SubPath   string `json:"subPath"`
			ReadOnly  bool   `json:"readOnly"`
		} `json:"volumeMounts"`
		Resources map[string]map[string]string `json:"resources"`
	}
	volume struct {
		Name      string `json:"name"`
		ConfigMap *struct {
			Name  string `json:"name"`
			Items []any  `json:"items"`
		} `json:"configMap"`
		Secret *struct {
			SecretName string `json:"secretName"`
		} `json:"secret"`
		EmptyDir *struct {
			SizeLimit string `json:"sizeLimit"`
		} `json:"emptyDir"`
	}
	statefulSet struct {
		Metadata meta `json:"metadata"`
		Spec     struct {
			Replicas             *int `json:"replicas"`
			VolumeClaimTemplates []struct {
				Metadata meta `json:"metadata"`
			} `json:"volumeClaimTemplates"`
			ServiceName         string        `json:"serviceName"`
			PodManagementPolicy string        `json:"podManagementPolicy"`
			Selector            labelSelector `json:"selector"`
			Template            struct {
				Metadata meta `json:"metadata"`
				Spec     struct {
					HostUsers                     *bool            `json:"hostUsers"`
					TerminationGracePeriodSeconds *int             `json:"terminationGracePeriodSeconds"`
					SecurityContext               *securityContext `json:"securityContext"`
					Containers                    []container      `json:"containers"`
					Volumes                       []volume         `json:"volumes"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	service struct {
		Metadata meta `json:"metadata"`
		Spec     struct {
			Type                     string            `json:"type"`
			ClusterIP                string            `json:"clusterIP"`
			PublishNotReadyAddresses bool              `json:"publishNotReadyAddresses"`
			Selector                 map[string]string `json:"selector"`
			Ports                    []struct {
				Name       string `json:"name"`
				Port       int    `json:"port"`
				TargetPort any    `json:"targetPort"`
			} `json:"ports"`
		} `json:"spec"`
	}
	configMap struct {
		Metadata meta              `json:"metadata"`
		Data     map[string]string `json:"data"`
	}
	secret struct {
		Metadata meta              `json:"metadata"`
		Data     map[string]string `json:"data"`
	}
	podDisruptionBudget struct {
		Metadata meta `json:"metadata"`
		Spec     struct {
			MaxUnavailable any           `json:"maxUnavailable"`
			MinAvailable   any           `json:"minAvailable"`
			Selector       labelSelector `json:"selector"`
		} `json:"spec"`
	}
	hpa struct {
		Metadata meta `json:"metadata"`
		Spec     struct {
			ScaleTargetRef struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Name       string `json:"name"`
			} `json:"scaleTargetRef"`
			MinReplicas int `json:"minReplicas"`
			MaxReplicas int `json:"maxReplicas"`
		} `json:"spec"`
	}
	// replicasBlock is the config's replicas block.
	replicasBlock struct {
		Count       *int     `json:"count"`
		PeerAddress string   `json:"peerAddress"`
		Peers       []string `json:"peers"`
		PeerListen  string   `json:"peerListen"`
		KeyDir      string   `json:"keyDir"`
		// DrainTimeout is the drain, within the grace period with the
		// shutdown after it.
		DrainTimeout string `json:"drainTimeout"`
	}
)

// want is what a rendering must show.
type want struct {
	release, namespace string
	fullname           string // the StatefulSet's name
	count              int    // the config's replicas.count
	hpa                bool   // an HPA owns the StatefulSet's replicas
	keySecret          string // the peer key Secret's name
	chartSecret        bool   // the chart renders that Secret
}

// checkChart checks everything the chart renders for a release (see
// want) and returns the rendered config, decoded.
func checkChart(t *testing.T, r *rendered, w want) map[string]any {
	t.Helper()
	t.Logf("rendered: %s", strings.Join(r.kinds(), " "))
	sts := one[statefulSet](t, r, "StatefulSet")
	if sts.Metadata.Name != w.fullname {
		t.Errorf("StatefulSet %q, want %q (pods FULLNAME-N)", sts.Metadata.Name, w.fullname)
	}
	spec := sts.Spec
	if spec.PodManagementPolicy != "Parallel" {
		t.Errorf("podManagementPolicy %q, want Parallel", spec.PodManagementPolicy)
	}
	switch {
	case w.hpa && spec.Replicas != nil:
		t.Errorf("StatefulSet replicas %d with an HPA: the HPA owns them (an upgrade would reset its count)", *spec.Replicas)
	case !w.hpa && (spec.Replicas == nil || *spec.Replicas != w.count):
		t.Errorf("StatefulSet replicas %v, want %d", ptrString(spec.Replicas), w.count)
	}
	podLabels := spec.Template.Metadata.Labels
	if len(spec.Selector.MatchLabels) == 0 || !subset(spec.Selector.MatchLabels, podLabels) {
		t.Errorf("StatefulSet selector %v does not select its pods' labels %v", spec.Selector.MatchLabels, podLabels)
	}
	for k := range spec.Template.Metadata.Annotations {
		if strings.Contains(strings.ToLower(k), "checksum") {
			t.Errorf("pod annotation %q: a config checksum would restart the pods on each config change; the config is reloaded live", k)
		}
	}

	pod := spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["http"] != 7331 || ports["peer"] != 7332 {
		t.Errorf("container ports %v, want http 7331 and peer 7332", ports)
	}
	for _, p := range []struct {
		name string
		pr   *probe
		path string
	}{{"startupProbe", c.StartupProbe, "/livez"}, {"livenessProbe", c.LivenessProbe, "/livez"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}} {
		switch {
		case p.pr == nil || p.pr.HTTPGet == nil:
			t.Errorf("%s: none, or not an HTTP GET", p.name)
		case p.pr.HTTPGet.Path != p.path:
			t.Errorf("%s: GET %s, want %s", p.name, p.pr.HTTPGet.Path, p.path)
		case portOf(p.pr.HTTPGet.Port, ports) != 7331:
			t.Errorf("%s: port %v, want the main port 7331", p.name, p.pr.HTTPGet.Port)
		}
	}
	podName := "none"
	for _, e := range c.Env {
		if e.Name == "POD_NAME" {
			podName = fmt.Sprintf("value %q", e.Value)
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				podName = "fieldRef " + e.ValueFrom.FieldRef.FieldPath
			}
		}
	}
	if podName != "fieldRef metadata.name" {
		t.Errorf("env POD_NAME: %s, want fieldRef metadata.name (the replica's ordinal is its trailing -N)", podName)
	}

	// The command: serve, its config file and state dir, its drain.
	args := c.Args
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("args %q, want serve …", args)
	}
	configFile, stateDir, drain := flagValue(args, "--config"), flagValue(args, "--state-dir"), flagValue(args, "--shutdown-timeout")
	if configFile == "" || stateDir == "" || drain == "" {
		t.Fatalf("args %q: want --config, --state-dir and --shutdown-timeout", args)
	}
	drainD, err := time.ParseDuration(drain)
	if err != nil {
		t.Fatalf("--shutdown-timeout %q: %v", drain, err)
	}
	// The drain (the config's replicas.drainTimeout) and the shutdown
	// after it (--shutdown-timeout) both fit in the grace period.
	var rc struct {
		Replicas replicasBlock `json:"replicas"`
	}
	for _, cm := range objects[configMap](t, r, "ConfigMap") {
		_ = json.Unmarshal([]byte(cm.Data["config.json"]), &rc)
	}
	drainT, _ := time.ParseDuration(rc.Replicas.DrainTimeout)
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= drainT+drainD {
		t.Errorf("terminationGracePeriodSeconds %v, want longer than the drain (%v) and the shutdown after it (%v)", ptrString(g), drainT, drainD)
	}

	// Volumes: the ConfigMap as a directory holding the config file, the
	// key Secret, the state directory writable.
	volumes := map[string]volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	for _, c := range spec.VolumeClaimTemplates {
		if _, ok := volumes[c.Metadata.Name]; ok {
			t.Errorf("volume %s is both the pod's and a volumeClaimTemplate", c.Metadata.Name)
		}
		volumes[c.Metadata.Name] = volume{Name: c.Metadata.Name}
	}
	cms := objects[configMap](t, r, "ConfigMap")
	if len(cms) != 1 {
		t.Fatalf("%d ConfigMaps, want 1", len(cms))
	}
	cm := cms[0]
	var configMount, keyMount, stateMount string
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok {
			t.Errorf("volumeMount %s: no such volume", m.Name)
			continue
		}
		switch {
		case v.ConfigMap != nil && v.ConfigMap.Name == cm.Metadata.Name:
			configMount = m.MountPath
			if m.SubPath != "" || len(v.ConfigMap.Items) != 0 {
				t.Errorf("the ConfigMap is mounted with subPath %q or items %v: the kubelet never updates a subPath mount, and live reload follows the directory", m.SubPath, v.ConfigMap.Items)
			}
		case v.Secret != nil && v.Secret.SecretName == w.keySecret:
			keyMount = m.MountPath
			if m.SubPath != "" {
				t.Errorf("the key Secret is mounted with subPath %q: rotation adds files to it", m.SubPath)
			}
			if !m.ReadOnly {
				t.Error("the key Secret's mount is not read-only")
			}
		case m.MountPath == stateDir:
			stateMount = m.Name
		}
	}
	if configMount == "" || filepath.Dir(configFile) != configMount {
		t.Errorf("--config %s is not in the ConfigMap's mount (%q)", configFile, configMount)
	}
	if _, ok := cm.Data[filepath.Base(configFile)]; !ok {
		t.Errorf("the ConfigMap has no %s: keys %v", filepath.Base(configFile), slices.Sorted(maps.Keys(cm.Data)))
	}
	if keyMount == "" {
		t.Errorf("no mount of the key Secret %s", w.keySecret)
	}
	if stateMount == "" {
		t.Errorf("the state directory %s is not a volume (the root file system is read-only)", stateDir)
	}

	// Least privilege unless containment asks for more (checkContainment).
	psc, csc := pod.SecurityContext, c.SecurityContext
	if psc == nil || csc == nil {
		t.Fatal("no pod or container securityContext")
	}
	if !isTrue(psc.RunAsNonRoot) && !isTrue(csc.RunAsNonRoot) {
		t.Error("runAsNonRoot is not set")
	}
	if !isTrue(csc.ReadOnlyRootFilesystem) {
		t.Error("readOnlyRootFilesystem is not set")
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []string{"ALL"}) || len(csc.Capabilities.Add) != 0 {
		t.Errorf("capabilities %+v, want drop [ALL] and none added", csc.Capabilities)
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("pod seccompProfile %+v, want RuntimeDefault", psc.SeccompProfile)
	}

	// The Services: the headless one is the StatefulSet's, publishes
	// not-ready pods, and has both ports; the clients' has the main one.
	svcs := map[string]service{}
	for _, s := range objects[service](t, r, "Service") {
		svcs[s.Metadata.Name] = s
	}
	peers, ok := svcs[spec.ServiceName]
	if !ok {
		t.Fatalf("no Service %q (the StatefulSet's serviceName); Services: %v", spec.ServiceName, slices.Sorted(maps.Keys(svcs)))
	}
	if peers.Spec.ClusterIP != "None" {
		t.Errorf("Service %s: clusterIP %q, want None (headless)", peers.Metadata.Name, peers.Spec.ClusterIP)
	}
	if !peers.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: publishNotReadyAddresses is not true: a starting or draining replica's peers could not reach it", peers.Metadata.Name)
	}
	if got := servicePorts(peers); !slices.Equal(got, []int{7331, 7332}) {
		t.Errorf("Service %s: ports %v, want [7331 7332]", peers.Metadata.Name, got)
	}
	if !subset(peers.Spec.Selector, podLabels) || len(peers.Spec.Selector) == 0 {
		t.Errorf("Service %s: selector %v does not select the pods (%v)", peers.Metadata.Name, peers.Spec.Selector, podLabels)
	}
	client, ok := svcs[w.fullname]
	if !ok {
		t.Fatalf("no client Service %q; Services: %v", w.fullname, slices.Sorted(maps.Keys(svcs)))
	}
	if client.Spec.ClusterIP == "None" || !slices.Equal(servicePorts(client), []int{7331}) || !subset(client.Spec.Selector, podLabels) {
		t.Errorf("client Service %s: clusterIP %q, ports %v, selector %v", client.Metadata.Name, client.Spec.ClusterIP, servicePorts(client), client.Spec.Selector)
	}
	if len(svcs) != 2 {
		t.Errorf("Services %v, want 2", slices.Sorted(maps.Keys(svcs)))
	}

	pdb := one[podDisruptionBudget](t, r, "PodDisruptionBudget")
	if fmt.Sprint(pdb.Spec.MaxUnavailable) != "1" || pdb.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget: maxUnavailable %v, minAvailable %v, want maxUnavailable 1", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
	}
	if len(pdb.Spec.Selector.MatchLabels) == 0 || !subset(pdb.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("PodDisruptionBudget: selector %v does not select the pods (%v)", pdb.Spec.Selector.MatchLabels, podLabels)
	}

	hpas := objects[hpa](t, r, "HorizontalPodAutoscaler")
	switch {
	case !w.hpa && len(hpas) != 0:
		t.Errorf("%d HorizontalPodAutoscalers, want none", len(hpas))
	case w.hpa && len(hpas) != 1:
		t.Errorf("%d HorizontalPodAutoscalers, want 1", len(hpas))
	case w.hpa:
		h := hpas[0].Spec
		if h.ScaleTargetRef.Kind != "StatefulSet" || h.ScaleTargetRef.Name != w.fullname || h.ScaleTargetRef.APIVersion != "apps/v1" {
			t.Errorf("HPA scales %+v, want the StatefulSet %s", h.ScaleTargetRef, w.fullname)
		}
		if h.MaxReplicas != w.count || h.MinReplicas < 1 || h.MinReplicas > h.MaxReplicas {
			t.Errorf("HPA %d..%d, want ..%d (the config's count)", h.MinReplicas, h.MaxReplicas, w.count)
		}
	}

	secrets := objects[secret](t, r, "Secret")
	switch {
	case !w.chartSecret && len(secrets) != 0:
		t.Errorf("%d Secrets rendered with an existing key Secret, want none", len(secrets))
	case w.chartSecret && (len(secrets) != 1 || secrets[0].Metadata.Name != w.keySecret):
		t.Errorf("Secrets %+v, want one, %s", secrets, w.keySecret)
	case w.chartSecret:
		// Text (mcpvisor trims white space around a key file's content, and
		// wants at least 32 bytes): 48 random bytes in base64.
		file, err := base64.StdEncoding.DecodeString(secrets[0].Data["current"])
		raw, err2 := base64.StdEncoding.DecodeString(string(file))
		if err != nil || err2 != nil || len(raw) != 48 || strings.TrimSpace(string(file)) != string(file) {
			t.Errorf("the key Secret's current: %q (%v, %v), want 48 random bytes in base64", file, err, err2)
		}
	}

	// The config: valid JSON, its replicas block the chart's.
	raw := cm.Data[filepath.Base(configFile)]
	if !json.Valid([]byte(raw)) {
		t.Fatalf("the rendered config is not valid JSON:\n%s", raw)
	}
	var cfg map[string]any
	var block struct {
		Listen   string         `json:"listen"`
		Replicas *replicasBlock `json:"replicas"`
	}
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(raw), &block); err != nil {
		t.Fatal(err)
	}
	if block.Listen != "0.0.0.0:7331" {
		t.Errorf("config listen %q, want 0.0.0.0:7331", block.Listen)
	}
	rb := block.Replicas
	if rb == nil {
		t.Fatalf("the config has no replicas block:\n%s", raw)
	}
	if rb.Count == nil || *rb.Count != w.count {
		t.Errorf("replicas.count %v, want %d", ptrString(rb.Count), w.count)
	}
	wantAddr := fmt.Sprintf("%s-{ordinal}.%s.%s.svc.cluster.local:7332", w.fullname, spec.ServiceName, w.namespace)
	if rb.PeerAddress != wantAddr {
		t.Errorf("replicas.peerAddress %q, want %q", rb.PeerAddress, wantAddr)
	}
	if rb.Peers != nil {
		t.Errorf("replicas.peers %q beside peerAddress", rb.Peers)
	}
	if rb.PeerListen != "0.0.0.0:7332" {
		t.Errorf("replicas.peerListen %q, want 0.0.0.0:7332", rb.PeerListen)
	}
	if rb.KeyDir == "" || rb.KeyDir != keyMount {
		t.Errorf("replicas.keyDir %q, want the key Secret's mount %q", rb.KeyDir, keyMount)
	}
	if d, err := time.ParseDuration(rb.DrainTimeout); err != nil || d <= 0 {
		t.Errorf("replicas.drainTimeout %q: want the drain", rb.DrainTimeout)
	}
	validate(t, raw)
	return cfg
}

var (
	mcpvisorOnce sync.Once
	mcpvisorBin  string
	mcpvisorErr  error
)

// validate runs `mcpvisor validate` (built from this tree, once) on a
// rendered config, as replica 0 of its StatefulSet.
func validate(t *testing.T, config string) {
	t.Helper()
	mcpvisorOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mcpvisor-deploy-test-")
		if err != nil {
			mcpvisorErr = err
			return
		}
		mcpvisorBin = filepath.Join(dir, "mcpvisor")
		cmd := exec.Command("go", "build", "-o", mcpvisorBin, "./cmd/mcpvisor")
		cmd.Dir = moduleRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			mcpvisorErr = fmt.Errorf("go build ./cmd/mcpvisor: %v\n%s", err, out)
		}
	})
	if mcpvisorErr != nil {
		t.Fatal(mcpvisorErr)
	}
	file := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), mcpvisorBin, "validate", "--config", file)
	cmd.Env = append(os.Environ(), "POD_NAME=mcpvisor-0", "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("mcpvisor validate of the rendered config: %v\n%s\n%s", err, out, config)
		return
	}
	t.Logf("mcpvisor validate: %s", strings.TrimSpace(string(out)))
}

func TestMain(m *testing.M) {
	code := m.Run()
	if mcpvisorBin != "" {
		os.RemoveAll(filepath.Dir(mcpvisorBin))
	}
	os.Exit(code)
}

func TestChartLint(t *testing.T) {
	t.Parallel() // so that TestImages, which needs no Helm, runs first: its time overlaps Helm's build
	h := helm(t)
	for _, values := range [][]string{nil, {filepath.Join(examplesDir(), "team.yaml")}} {
		args := []string{"lint", "--strict", chartDir()}
		for _, v := range values {
			args = append(args, "--values", v)
		}
		out, err := run(t, nil, h, args...)
		if err != nil {
			t.Errorf("helm lint with %v: %v\n%s", values, err, out)
			continue
		}
		t.Logf("helm lint with %v:\n%s", values, out)
	}
}

func TestChartDefaults(t *testing.T) {
	t.Parallel()
	r, err := render(t, "mcpvisor", "team", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := checkChart(t, r, want{release: "mcpvisor", namespace: "team", fullname: "mcpvisor", count: 2,
		keySecret: "mcpvisor-peer-key", chartSecret: true})
	if s, ok := cfg["mcpServers"].(map[string]any); !ok || len(s) != 0 {
		t.Errorf("default mcpServers %v, want {}", cfg["mcpServers"])
	}
}

// TestChartTeam renders the team example: 3 replicas, auth, a
// single-placement server, an HPA.
func TestChartTeam(t *testing.T) {
	t.Parallel()
	r, err := render(t, "mcpvisor", "mcp", []string{filepath.Join(examplesDir(), "team.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	cfg := checkChart(t, r, want{release: "mcpvisor", namespace: "mcp", fullname: "mcpvisor", count: 3, hpa: true,
		keySecret: "mcpvisor-peer-key", chartSecret: true})
	if auth, _ := cfg["auth"].(map[string]any); auth["issuer"] == nil || auth["publicUrl"] == nil {
		t.Errorf("config auth %v, want the example's issuer and publicUrl", cfg["auth"])
	}
	servers, _ := cfg["mcpServers"].(map[string]any)
	placements := map[string]any{}
	for name, s := range servers {
		placements[name] = s.(map[string]any)["placement"]
	}
	if placements["memory"] != "one" || placements["github"] != nil {
		t.Errorf("placements %v, want memory one and github the default", placements)
	}
	sts := one[statefulSet](t, r, "StatefulSet")
	if img := sts.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(img, ":dev-node") {
		t.Errorf("image %s: the example's npx servers need the node image", img)
	}
}

// TestChartNames renders another release name and namespace: every name
// derives from the release, and the peer address follows; with an existing
// key Secret, a persistent state directory and a pod user namespace.
func TestChartNames(t *testing.T) {
	t.Parallel()
	r, err := render(t, "acme", "tools", nil, "replicaCount=5", "peerKey.existingSecret=acme-key",
		"persistence.enabled=true", "hostUsers=false")
	if err != nil {
		t.Fatal(err)
	}
	checkChart(t, r, want{release: "acme", namespace: "tools", fullname: "acme-mcpvisor", count: 5,
		keySecret: "acme-key"})
	sts := one[statefulSet](t, r, "StatefulSet")
	if v := sts.Spec.VolumeClaimTemplates; len(v) != 1 || v[0].Metadata.Name != "state" {
		t.Errorf("persistence: volumeClaimTemplates %+v, want one, state", v)
	}
	if h := sts.Spec.Template.Spec.HostUsers; h == nil || *h {
		t.Errorf("hostUsers=false: the pod's hostUsers is %v", ptrString(h))
	}
}

// TestChartContainment: each opt-in adds what its layer needs, no more.
func TestChartContainment(t *testing.T) {
	t.Parallel()
	r, err := render(t, "mcpvisor", "team", nil, "containment.pidNamespace=true")
	if err != nil {
		t.Fatal(err)
	}
	sts := one[statefulSet](t, r, "StatefulSet")
	pod := sts.Spec.Template.Spec
	sc := pod.Containers[0].SecurityContext
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Add, []string{"SYS_ADMIN"}) || !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("pidNamespace: capabilities %+v, want ALL dropped and SYS_ADMIN added", sc.Capabilities)
	}
	if isTrue(sc.Privileged) || !isTrue(pod.SecurityContext.RunAsNonRoot) || !isTrue(sc.ReadOnlyRootFilesystem) {
		t.Errorf("pidNamespace: privileged %v, runAsNonRoot %v, readOnlyRootFilesystem %v: want it non-root, read-only, not privileged",
			ptrString(sc.Privileged), ptrString(pod.SecurityContext.RunAsNonRoot), ptrString(sc.ReadOnlyRootFilesystem))
	}

	r, err = render(t, "mcpvisor", "team", nil, "containment.cgroup=true")
	if err != nil {
		t.Fatal(err)
	}
	sts = one[statefulSet](t, r, "StatefulSet")
	pod = sts.Spec.Template.Spec
	sc = pod.Containers[0].SecurityContext
	if !isTrue(sc.Privileged) || sc.RunAsUser == nil || *sc.RunAsUser != 0 || isTrue(pod.SecurityContext.RunAsNonRoot) {
		t.Errorf("cgroup: privileged %v, runAsUser %v, pod runAsNonRoot %v: want a privileged root container (a writable /sys/fs/cgroup, owned by root)",
			ptrString(sc.Privileged), ptrString(sc.RunAsUser), ptrString(pod.SecurityContext.RunAsNonRoot))
	}
	if !isTrue(sc.ReadOnlyRootFilesystem) {
		t.Error("cgroup: the root file system is no longer read-only")
	}
}

// TestChartRefuses: values the chart refuses, each with its message.
func TestChartRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  []string
		msg  string
	}{
		{"no replicas", []string{"replicaCount=0"}, "replicaCount must be a whole number of at least 1 (it is 0)"},
		{"a fraction of a replica", []string{"replicaCount=1.5"}, "replicaCount must be a whole number of at least 1 (it is 1.5)"},
		{"a count that is no number", []string{"replicaCount=three"}, "replicaCount must be a whole number of at least 1 (it is three)"},
		{"an HPA below its minimum", []string{"autoscaling.enabled=true", "autoscaling.minReplicas=3", "autoscaling.maxReplicas=2"}, "autoscaling: minReplicas (3) must be a whole number of at least 1, and maxReplicas (2) one of at least minReplicas"},
		{"the count in config", []string{"config.replicas.count=4"}, "config.replicas.count is set by the chart"},
		{"the peers in config", []string{"config.replicas.peerAddress=x:1"}, "config.replicas.peerAddress is set by the chart"},
		{"listen in config", []string{"config.listen=127.0.0.1:80"}, "config.listen is set by the chart"},
		{"an unknown placement", []string{"config.mcpServers.s.command=x", "config.mcpServers.s.placement=two"}, `config.mcpServers.s.placement is two: it is "every"`},
		{"a grace period within the drain", []string{"drainSeconds=60"}, "terminationGracePeriodSeconds (45) must be longer than drainSeconds (60)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, "mcpvisor", "team", nil, tc.set...)
			if err == nil {
				t.Fatalf("helm template with %q succeeded, want it to fail with %q", tc.set, tc.msg)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("helm template with %q failed with\n%v\nwant the message %q", tc.set, err, tc.msg)
			}
		})
	}
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// portOf resolves a probe's or Service's port (a number or a port name).
func portOf(p any, named map[string]int) int {
	switch v := p.(type) {
	case float64:
		return int(v)
	case string:
		return named[v]
	}
	return 0
}

func servicePorts(s service) []int {
	var out []int
	for _, p := range s.Spec.Ports {
		out = append(out, p.Port)
	}
	slices.Sort(out)
	return out
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func isTrue(b *bool) bool { return b != nil && *b }

func ptrString[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}
