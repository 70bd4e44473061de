package dat

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/softrnic/softrnic/rnic/iwarp"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// ProviderInfo is DAT_PROVIDER_INFO (spec §8.2.2.1).
type ProviderInfo struct {
	Name         string // ia_name
	VersionMajor uint32 // dapl_version_major
	VersionMinor uint32 // dapl_version_minor
	ThreadSafe   bool
}

// NameMaxLength is DAT_NAME_MAX_LENGTH (including the C terminator).
const NameMaxLength = 256

// Provider is a registered DAT provider (DAT_PROVIDER, spec §8.2.1): an IA
// name bound to a transport of the softrnic engine. InstanceData is the
// dat.conf instance string, "<transport> [<local address>]", e.g.
// "iwarp 127.0.0.1" or "rocev2 192.0.2.1:4791" (an in-process device of the IA's
// own), or "rocev2 @softrnic0": device softrnic0 of the running softrnic daemon,
// which the IA attaches to and shares with every process attached to it (package
// host). Related lists IA names sharing hardware with this one.
type Provider struct {
	Info         ProviderInfo
	InstanceData string
	Related      []string
	// IWARP, when not nil, configures the iWARP transport of the IAs of an
	// "iwarp" provider (MPA options, RFC 7306 extensions, timeouts). nil
	// means iwarp.DefaultConfig() with the RFC 7306 extensions enabled.
	IWARP *iwarp.Config
	// RoCE, when not nil, configures the RoCEv2 transport of the IAs of a "rocev2"
	// provider (MTU, timeouts, retries; StrictICRC: verify every IPv4 ICRC with the IP
	// ID taken as 0 and drop what fails, instead of solving for the ID — use it when
	// every peer sends ID 0 or IPv6, see rnic/rocev2.Config). nil means
	// rocev2.DefaultConfig().
	RoCE *rocev2.Config
}

type regEntry struct {
	p    *Provider
	refs int // open IAs
}

// Registry is the DAT registry (spec §8.2): providers by IA name.
type Registry struct {
	mu        sync.Mutex
	providers map[string]*regEntry
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{providers: make(map[string]*regEntry)} }

// maxProviders bounds the registry (DAT_INSUFFICIENT_RESOURCES past it).
const maxProviders = 64

// DefaultRegistry is the process registry used by the package-level
// functions. It starts with the providers of DefaultConf.
var DefaultRegistry = NewRegistry()

// DefaultConf is the built-in static registry, in dat.conf format.
const DefaultConf = `# softrnic built-in DAT static registry
softrnic-iwarp u2.0 threadsafe default libsoftrnic.so softrnic.1.0 "iwarp 127.0.0.1" ""
ofa-v2-iwarp u2.0 threadsafe nondefault libsoftrnic.so softrnic.1.0 "iwarp 127.0.0.1" ""
softrnic-rocev2 u2.0 threadsafe nondefault libsoftrnic.so softrnic.1.0 "rocev2 127.0.0.1:4791" ""
`

func init() {
	es, err := ParseConf(strings.NewReader(DefaultConf))
	if err != nil {
		panic(err)
	}
	if err := DefaultRegistry.Load(es); err != nil {
		panic(err)
	}
}

// Load adds a provider for each user-level (u2.x) dat.conf entry.
func (r *Registry) Load(entries []ConfEntry) error {
	for _, e := range entries {
		if e.Kernel || e.APIMajor != VersionMajor {
			continue
		}
		p := &Provider{Info: ProviderInfo{Name: e.IAName, VersionMajor: uint32(e.APIMajor),
			VersionMinor: uint32(e.APIMinor), ThreadSafe: e.ThreadSafe}, InstanceData: e.InstanceData}
		if err := r.AddProvider(p); err != nil {
			return fmt.Errorf("dat: provider %q: %w", e.IAName, err)
		}
	}
	return nil
}

// LoadFile loads a static registry file in dat.conf format (spec §8.4.5),
// e.g. /etc/dat.conf.
func (r *Registry) LoadFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	es, err := ParseConf(f)
	if err != nil {
		return err
	}
	return r.Load(es)
}

// ListProviders is dat_registry_list_providers (spec §8.2.2.1): up to max
// entries, sorted by name. If max is smaller than the number of providers
// it returns DAT_INVALID_PARAMETER and that number.
func (r *Registry) ListProviders(max int) ([]ProviderInfo, int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.providers)
	if max < n || max <= 0 {
		return nil, n, invalidArg(1)
	}
	out := make([]ProviderInfo, 0, n)
	for _, e := range r.providers {
		out = append(out, e.p.Info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, n, nil
}

// AddProvider is dat_registry_add_provider (spec §8.2.3.1).
func (r *Registry) AddProvider(p *Provider) error {
	if p == nil || p.Info.Name == "" || len(p.Info.Name) >= NameMaxLength {
		return invalidArg(1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.providers[p.Info.Name]; ok {
		return ErrProviderAlreadyRegistered
	}
	if len(r.providers) >= maxProviders {
		return ErrInsufficientResources
	}
	r.providers[p.Info.Name] = &regEntry{p: p}
	return nil
}

// RemoveProvider is dat_registry_remove_provider (spec §8.2.3.2): it fails
// with DAT_PROVIDER_IN_USE while an IA of the provider is open.
func (r *Registry) RemoveProvider(p *Provider) error {
	if p == nil {
		return invalidArg(1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.providers[p.Info.Name]
	if !ok || e.p != p {
		return invalidArg(1)
	}
	if e.refs > 0 {
		return ErrProviderInUse
	}
	delete(r.providers, p.Info.Name)
	return nil
}

// Lookup returns the provider registered under name, or nil.
func (r *Registry) Lookup(name string) *Provider {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.providers[name]; ok {
		return e.p
	}
	return nil
}

// ProvidersRelated is dat_registry_providers_related (spec §8.2.2.2): HATrue
// or HAFalse when both providers agree, HAConflicting when they do not.
// Two IAs on the same transport instance (identical instance data) share
// hardware.
func (r *Registry) ProvidersRelated(ia1, ia2 string) (HARelationship, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e1, ok1 := r.providers[ia1]
	e2, ok2 := r.providers[ia2]
	if !ok1 {
		return HAUnknown, invalidArg(1)
	}
	if !ok2 {
		return HAUnknown, invalidArg(2)
	}
	a, b := e1.p.relatedTo(e2.p), e2.p.relatedTo(e1.p)
	switch {
	case a == b && a:
		return HATrue, nil
	case a == b:
		return HAFalse, nil
	}
	return HAConflicting, nil
}

func (p *Provider) relatedTo(q *Provider) bool {
	if p == q || p.InstanceData == q.InstanceData {
		return true
	}
	for _, n := range p.Related {
		if n == q.Info.Name {
			return true
		}
	}
	return false
}

// acquire finds a provider for opening an IA and takes a reference.
func (r *Registry) acquire(name string) (*Provider, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.providers[name]
	if !ok {
		return nil, ErrNameNotRegistered
	}
	e.refs++
	return e.p, nil
}

func (r *Registry) release(p *Provider) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.providers[p.Info.Name]; ok && e.p == p && e.refs > 0 {
		e.refs--
	}
}

// ListProviders is Registry.ListProviders on DefaultRegistry.
func ListProviders(max int) ([]ProviderInfo, int, error) { return DefaultRegistry.ListProviders(max) }

// AddProvider is Registry.AddProvider on DefaultRegistry.
func AddProvider(p *Provider) error { return DefaultRegistry.AddProvider(p) }

// RemoveProvider is Registry.RemoveProvider on DefaultRegistry.
func RemoveProvider(p *Provider) error { return DefaultRegistry.RemoveProvider(p) }

// ProvidersRelated is Registry.ProvidersRelated on DefaultRegistry.
func ProvidersRelated(ia1, ia2 string) (HARelationship, error) {
	return DefaultRegistry.ProvidersRelated(ia1, ia2)
}
