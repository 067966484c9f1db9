package config

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// settings are the fields allowed both in "defaults" and in a server. A nil
// field was not given at that level.
type settings struct {
	idleTimeout, startGrace, initTimeout, requestTimeout *time.Duration
	eager, pin                                           *bool
	prefix                                               *string
	allow, deny                                          *[]string
	sharing                                              *string
	placement                                            *string
	clientCaps                                           *[]string
	protocol                                             *string
	launch                                               *string
	maxInstances                                         *int
	stdinWait, termWait                                  *time.Duration
	policy                                               *lifecycle.Restart
	maxAttempts                                          *int
	backoffInitial, backoffMax                           *time.Duration
	backoffMultiplier, backoffJitter                     *float64
	healthyPeriod                                        *time.Duration
	// limits: 0 is "unlimited", given to override a default.
	memoryLimit, maxIdleMemory *uint64
	pidsLimit                  *int
	cpuLimit                   *float64
}

// settingNames are the keys of a settings object, for suggestions.
var settingNames = []string{"idleTimeout", "startGrace", "initTimeout", "requestTimeout", "eager", "pin", "prefix", "tools", "sharing", "placement", "clientCapabilities", "protocol", "launch", "maxInstances", "stop", "restart", "limits", "maxIdleMemory"}

func ptr[T any](v T) *T { return &v }

// builtinSettings are the defaults of DESIGN.md. prefix stays nil: it
// defaults to each server's name.
func builtinSettings() settings {
	return settings{
		idleTimeout:       ptr(DefaultIdleTimeout),
		startGrace:        ptr(DefaultStartGrace),
		initTimeout:       ptr(DefaultInitTimeout),
		requestTimeout:    ptr(DefaultRequestTimeout),
		eager:             ptr(false),
		pin:               ptr(false),
		sharing:           ptr(SharingShared),
		placement:         ptr(PlacementEvery),
		protocol:          ptr(ProtocolAuto),
		launch:            ptr(LaunchFlatten),
		maxInstances:      ptr(DefaultMaxInstances),
		stdinWait:         ptr(DefaultStdinWait),
		termWait:          ptr(DefaultTermWait),
		policy:            ptr(lifecycle.RestartOnFailure),
		maxAttempts:       ptr(lifecycle.DefaultMaxAttempts),
		backoffInitial:    ptr(lifecycle.DefaultBackoffInitial),
		backoffMax:        ptr(lifecycle.DefaultBackoffMax),
		backoffMultiplier: ptr(lifecycle.DefaultBackoffMultiplier),
		backoffJitter:     ptr(DefaultBackoffJitter),
		healthyPeriod:     ptr(lifecycle.DefaultHealthyPeriod),
	}
}

func over[T any](dst **T, src *T) {
	if src != nil {
		*dst = src
	}
}

// overlay returns s with every field set in o replacing s's.
func (s settings) overlay(o settings) settings {
	over(&s.idleTimeout, o.idleTimeout)
	over(&s.startGrace, o.startGrace)
	over(&s.initTimeout, o.initTimeout)
	over(&s.requestTimeout, o.requestTimeout)
	over(&s.eager, o.eager)
	over(&s.pin, o.pin)
	over(&s.prefix, o.prefix)
	over(&s.allow, o.allow)
	over(&s.deny, o.deny)
	over(&s.sharing, o.sharing)
	over(&s.placement, o.placement)
	over(&s.clientCaps, o.clientCaps)
	over(&s.protocol, o.protocol)
	over(&s.launch, o.launch)
	over(&s.maxInstances, o.maxInstances)
	over(&s.stdinWait, o.stdinWait)
	over(&s.termWait, o.termWait)
	over(&s.policy, o.policy)
	over(&s.maxAttempts, o.maxAttempts)
	over(&s.backoffInitial, o.backoffInitial)
	over(&s.backoffMax, o.backoffMax)
	over(&s.backoffMultiplier, o.backoffMultiplier)
	over(&s.backoffJitter, o.backoffJitter)
	over(&s.healthyPeriod, o.healthyPeriod)
	over(&s.memoryLimit, o.memoryLimit)
	over(&s.pidsLimit, o.pidsLimit)
	over(&s.cpuLimit, o.cpuLimit)
	over(&s.maxIdleMemory, o.maxIdleMemory)
	return s
}

// apply copies fully layered settings (built-ins underneath) into srv.
func (s settings) apply(srv *Server) {
	srv.IdleTimeout = *s.idleTimeout
	srv.StartGrace = *s.startGrace
	srv.InitTimeout = *s.initTimeout
	srv.RequestTimeout = *s.requestTimeout
	srv.Eager = *s.eager
	srv.Pin = *s.pin
	srv.Prefix = srv.Name
	if s.prefix != nil {
		srv.Prefix = *s.prefix
	}
	if s.allow != nil {
		srv.Tools.Allow = append([]string{}, (*s.allow)...)
	}
	if s.deny != nil && len(*s.deny) > 0 {
		srv.Tools.Deny = append([]string{}, (*s.deny)...)
	}
	srv.Sharing = *s.sharing
	srv.Placement = *s.placement
	if s.clientCaps != nil {
		srv.ClientCapabilities = append([]string{}, (*s.clientCaps)...)
	}
	srv.Protocol = *s.protocol
	srv.AsWritten = *s.launch == LaunchAsWritten
	srv.MaxInstances = *s.maxInstances
	srv.StdinWait = *s.stdinWait
	srv.TermWait = *s.termWait
	r := RestartConfig{
		Policy:        *s.policy,
		MaxAttempts:   *s.maxAttempts,
		HealthyPeriod: *s.healthyPeriod,
		Backoff: lifecycle.Backoff{
			Initial:    *s.backoffInitial,
			Max:        max(*s.backoffMax, *s.backoffInitial),
			Multiplier: *s.backoffMultiplier,
			Jitter:     *s.backoffJitter,
		},
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = lifecycle.DefaultMaxAttempts
	}
	srv.Restart = r
	var l Limits
	deref(&l.Memory, s.memoryLimit)
	deref(&l.PIDs, s.pidsLimit)
	deref(&l.CPU, s.cpuLimit)
	deref(&l.MaxIdleMemory, s.maxIdleMemory)
	if l != (Limits{}) {
		srv.Limits = &l
	}
}

func deref[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

// settingsField parses key of a defaults or server object into s. It
// returns false when key is not a setting.
func (p *parser) settingsField(s *settings, key string, v *node, at string) bool {
	switch key {
	case "idleTimeout":
		s.idleTimeout = p.duration(v, at)
	case "startGrace":
		s.startGrace = p.duration(v, at)
	case "initTimeout":
		s.initTimeout = p.duration(v, at)
	case "requestTimeout":
		s.requestTimeout = p.duration(v, at)
	case "maxInstances":
		if n := p.integer(v, at); n != nil {
			if *n < 1 {
				p.errorf(at, "%d is not a positive number of instances", *n)
			} else {
				s.maxInstances = n
			}
		}
	case "eager":
		s.eager = p.boolean(v, at)
	case "pin":
		s.pin = p.boolean(v, at)
	case "prefix":
		if str, ok := p.str(v, at); ok {
			if str != "" && !validName(str) {
				p.errorf(at, "%q is not a valid prefix: use only letters, digits, '_', '.' and '-' (or \"\" for no prefix)", str)
			} else {
				s.prefix = &str
			}
		}
	case "sharing":
		if str, ok := p.str(v, at); ok {
			switch str {
			case SharingShared, SharingPerSession, SharingPerIdentity:
				s.sharing = &str
			default:
				p.errorf(at, "%q is not a sharing mode (valid: %q, %q, %q)", str, SharingShared, SharingPerSession, SharingPerIdentity)
			}
		}
	case "placement":
		if str, ok := p.str(v, at); ok {
			switch str {
			case PlacementEvery, PlacementOne:
				s.placement = &str
			default:
				p.errorf(at, "%q is not a placement (valid: %q, %q)", str, PlacementEvery, PlacementOne)
			}
		}
	case "clientCapabilities":
		s.clientCaps = p.clientCapabilities(v, at)
	case "protocol":
		if str, ok := p.str(v, at); ok {
			switch str {
			case ProtocolAuto, ProtocolLegacy, ProtocolModern:
				s.protocol = &str
			default:
				p.errorf(at, "%q is not a protocol era (valid: %q, %q, %q)", str, ProtocolAuto, ProtocolLegacy, ProtocolModern)
			}
		}
	case "launch":
		if str, ok := p.str(v, at); ok {
			switch str {
			case LaunchFlatten, LaunchAsWritten:
				s.launch = &str
			default:
				p.errorf(at, "%q is not a launch mode (valid: %q, %q)", str, LaunchFlatten, LaunchAsWritten)
			}
		}
	case "tools":
		p.object(v, at, []string{"allow", "deny"}, func(key string, v *node, at string) bool {
			switch key {
			case "allow":
				s.allow = p.patterns(v, at)
				if s.allow != nil && len(*s.allow) == 0 {
					p.warnf(at, "an empty allow list exposes no tools (use [\"*\"] for all)")
				}
			case "deny":
				s.deny = p.patterns(v, at)
			default:
				return false
			}
			return true
		})
	case "stop":
		p.object(v, at, []string{"stdinWait", "termWait"}, func(key string, v *node, at string) bool {
			switch key {
			case "stdinWait":
				s.stdinWait = p.duration(v, at)
			case "termWait":
				s.termWait = p.duration(v, at)
			default:
				return false
			}
			return true
		})
	case "limits":
		p.object(v, at, []string{"memory", "pids", "cpu"}, func(key string, v *node, at string) bool {
			switch key {
			case "memory":
				if n := p.size(v, at, true); n != nil {
					if *n != 0 && *n < minMemoryLimit {
						p.errorf(at, "%s is below 1 MiB: no server runs in that", sizeText(v))
					} else {
						s.memoryLimit = n
					}
				}
			case "pids":
				s.pidsLimit = p.pidsLimit(v, at)
			case "cpu":
				s.cpuLimit = p.cpuLimit(v, at)
			default:
				return false
			}
			return true
		})
	case "maxIdleMemory":
		s.maxIdleMemory = p.size(v, at, true)
	case "restart":
		p.object(v, at, []string{"policy", "maxAttempts", "backoff", "healthyPeriod"}, func(key string, v *node, at string) bool {
			switch key {
			case "policy":
				s.policy = p.restartPolicy(v, at)
			case "maxAttempts":
				s.maxAttempts = p.integer(v, at)
			case "healthyPeriod":
				s.healthyPeriod = p.duration(v, at)
			case "backoff":
				p.backoff(s, v, at)
			default:
				return false
			}
			return true
		})
	default:
		return false
	}
	return true
}

func (p *parser) backoff(s *settings, v *node, at string) {
	p.object(v, at, []string{"initial", "max", "multiplier", "jitter"}, func(key string, v *node, at string) bool {
		switch key {
		case "initial", "max":
			d := p.duration(v, at)
			if d != nil && *d == 0 {
				p.errorf(at, "must be more than 0")
				d = nil
			}
			if key == "initial" {
				s.backoffInitial = d
			} else {
				s.backoffMax = d
			}
		case "multiplier":
			if f := p.number(v, at); f != nil {
				if *f < 1 {
					p.errorf(at, "%v is less than 1 (1 keeps the delay constant; 2 doubles it)", *f)
				} else {
					s.backoffMultiplier = f
				}
			}
		case "jitter":
			if f := p.number(v, at); f != nil {
				if *f < 0 || *f > 1 {
					p.errorf(at, "%v is outside 0..1 (0.2 spreads each delay over its last 20%%)", *f)
				} else {
					s.backoffJitter = f
				}
			}
		default:
			return false
		}
		return true
	})
}

func (p *parser) restartPolicy(v *node, at string) *lifecycle.Restart {
	str, ok := p.str(v, at)
	if !ok {
		return nil
	}
	for _, r := range []lifecycle.Restart{lifecycle.RestartOnFailure, lifecycle.RestartNever, lifecycle.RestartAlways} {
		if str == r.String() {
			return &r
		}
	}
	p.errorf(at, "%q is not a restart policy (valid: \"on-failure\", \"never\", \"always\")", str)
	return nil
}

// durationHint ends every message about a malformed duration.
const durationHint = `(use e.g. "90s" or "10m", or a number of seconds)`

// duration parses a Go duration string or a number of seconds; null is
// absent. Negative values are errors.
func (p *parser) duration(v *node, at string) *time.Duration {
	var d time.Duration
	switch v.kind {
	case kindNull:
		return nil
	case kindString:
		var err error
		d, err = time.ParseDuration(v.str)
		if err != nil {
			p.errorf(at, "%s is not a duration %s", strconv.Quote(v.str), durationHint)
			return nil
		}
		if d < 0 {
			p.errorf(at, "%s is negative; durations must be 0 or more (0 disables)", strconv.Quote(v.str))
			return nil
		}
	case kindNumber:
		f, err := v.num.Float64()
		if err != nil || math.Abs(f) > float64(math.MaxInt64)/float64(time.Second) {
			p.errorf(at, "%s seconds is out of range", v.num)
			return nil
		}
		if f < 0 {
			p.errorf(at, "%s is negative; durations must be 0 or more (0 disables)", v.num)
			return nil
		}
		d = time.Duration(f * float64(time.Second))
	default:
		p.errorf(at, "must be a duration, not %s %s", v.kind, durationHint)
		return nil
	}
	return &d
}

func (p *parser) number(v *node, at string) *float64 {
	switch v.kind {
	case kindNull:
		return nil
	case kindNumber:
		f, err := v.num.Float64()
		if err != nil {
			p.errorf(at, "%s is out of range", v.num)
			return nil
		}
		return &f
	}
	p.errorf(at, "must be a number, not %s", v.kind)
	return nil
}

func (p *parser) integer(v *node, at string) *int {
	switch v.kind {
	case kindNull:
		return nil
	case kindNumber:
		n, err := strconv.ParseInt(v.num.String(), 10, 32)
		if err != nil {
			p.errorf(at, "%s is not a whole number in range", v.num)
			return nil
		}
		i := int(n)
		return &i
	}
	p.errorf(at, "must be a whole number, not %s", v.kind)
	return nil
}

func (p *parser) boolean(v *node, at string) *bool {
	switch v.kind {
	case kindNull:
		return nil
	case kindBool:
		return &v.b
	case kindString:
		if s := strings.ToLower(v.str); s == "true" || s == "false" {
			p.errorf(at, "must be a boolean, not a string (write %s without quotes)", s)
			return nil
		}
	}
	p.errorf(at, "must be a boolean, not %s", v.kind)
	return nil
}

// patterns parses an array of path.Match patterns.
// clientCapabilities reads a list of the client capabilities mcpvisor
// carries (CarriedCapabilities), each at most once.
func (p *parser) clientCapabilities(v *node, at string) *[]string {
	l, ok := p.strings(v, at)
	if !ok {
		return nil
	}
	bad := false
	for i, c := range l {
		switch {
		case !slices.Contains(CarriedCapabilities, c):
			p.errorf(index(at, i), "%q is not a client capability mcpvisor carries (valid: %s)", c, strings.Join(quoted(CarriedCapabilities), ", "))
			bad = true
		case slices.Index(l, c) < i:
			p.errorf(index(at, i), "%q is listed twice", c)
			bad = true
		}
	}
	if bad {
		return nil
	}
	return &l
}

func quoted(l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = strconv.Quote(s)
	}
	return out
}

func (p *parser) patterns(v *node, at string) *[]string {
	l, ok := p.strings(v, at)
	if !ok {
		return nil
	}
	bad := false
	for i, pat := range l {
		if _, err := pathMatch(pat); err != nil {
			p.errorf(index(at, i), "%q is not a valid pattern: %v", pat, err)
			bad = true
		}
	}
	if bad {
		return nil
	}
	return &l
}
