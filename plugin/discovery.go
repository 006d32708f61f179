package plugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// DNSRecord is the kind of DNS record a DNSDiscovery reads.
type DNSRecord int

const (
	// RecordA: the name's A records are the replicas' IPv4 addresses, all
	// listening on DNSDiscovery.Port.
	RecordA DNSRecord = iota
	// RecordSRV: the name's SRV records give each replica's host name and
	// port; each host name is resolved (A records) by the same resolver.
	RecordSRV
)

// DNSDiscovery finds the replicas in DNS, as GitLab's database load
// balancer does (service_discovery): the name is resolved every Interval
// and, when the addresses change, the replicas become Config.Replicas
// plus one replica per address (Plugin.SetReplicas: a new replica serves
// reads once a poll found it fresh enough, a removed one drains). A
// lookup that fails, or finds no address, keeps the replicas as they are
// (logged once per failing spell, counted in
// freshread_discovery_failures_total) and is tried again after
// min(Interval, 5s); so is a change SetReplicas refuses (a discovered
// server that is not a replica, or one DSN reaching several servers).
type DNSDiscovery struct {
	// Name is the DNS name resolved, for example
	// "replicas.db.service.consul". Required.
	Name string
	// Record is the kind of record read. Default: RecordA.
	Record DNSRecord
	// Port is every replica's port with RecordA (required there); SRV
	// records carry their own.
	Port int
	// Interval is how often Name is resolved. Default: 1 minute.
	Interval time.Duration
	// Nameserver is the DNS server asked, as "host:port" (for example a
	// Consul agent's "127.0.0.1:8600"). Default: the system's resolver.
	Nameserver string
	// Timeout bounds one refresh: the lookup and the opening of the new
	// replicas (a replica that does not answer in time is added down, and
	// used once a poll answers). Default: 10s.
	Timeout time.Duration
	// Dialector returns the dialector of the replica at host (an IP
	// address) and port, for example
	//
	//	func(host string, port int) gorm.Dialector {
	//		return postgres.Open(fmt.Sprintf("host=%s port=%d user=app dbname=app", host, port))
	//	}
	//
	// Open it from a DSN (postgres.Open, mysql.Open): a replica found at
	// the next refresh with the same DSN is kept as it is. The replica is
	// named "host:port". Required.
	Dialector func(host string, port int) gorm.Dialector
}

// Discovery defaults (DNSDiscovery).
const (
	defaultDiscoveryInterval = time.Minute
	defaultDiscoveryTimeout  = 10 * time.Second
	discoveryRetry           = 5 * time.Second
)

// errNoAddresses: a lookup answered with no address.
var errNoAddresses = errors.New("no address")

func (d *DNSDiscovery) withDefaults() *DNSDiscovery {
	if d == nil {
		return nil
	}
	c := *d
	if c.Interval <= 0 {
		c.Interval = defaultDiscoveryInterval
	}
	if c.Timeout <= 0 {
		c.Timeout = defaultDiscoveryTimeout
	}
	return &c
}

func (d *DNSDiscovery) validate() error {
	switch {
	case d == nil:
		return nil
	case d.Name == "":
		return fmt.Errorf("%w: Discovery.Name is empty: give the DNS name that lists the replicas", ErrConfig)
	case d.Record != RecordA && d.Record != RecordSRV:
		return fmt.Errorf("%w: Discovery.Record %d is neither RecordA nor RecordSRV", ErrConfig, d.Record)
	case d.Record == RecordA && (d.Port <= 0 || d.Port > 65535):
		return fmt.Errorf("%w: Discovery.Port %d: A records carry no port, give the replicas' port (1-65535)", ErrConfig, d.Port)
	case d.Dialector == nil:
		return fmt.Errorf("%w: Discovery.Dialector is nil: give the function that opens a replica at a host and port", ErrConfig)
	}
	if d.Nameserver != "" {
		if _, _, err := net.SplitHostPort(d.Nameserver); err != nil {
			return fmt.Errorf("%w: Discovery.Nameserver %q is not host:port: %w", ErrConfig, d.Nameserver, err)
		}
	}
	return nil
}

// hostPort is one replica address found in DNS.
type hostPort struct {
	host string
	port int
}

func (a hostPort) String() string { return net.JoinHostPort(a.host, strconv.Itoa(a.port)) }

func (d *DNSDiscovery) resolver() *net.Resolver {
	if d.Nameserver == "" {
		return net.DefaultResolver
	}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var dialer net.Dialer
		return dialer.DialContext(ctx, network, d.Nameserver)
	}}
}

// lookup resolves the replicas' addresses, sorted; an error when any part
// of the answer failed (a partial answer would remove replicas that are
// there) or it has no address.
func (d *DNSDiscovery) lookup(ctx context.Context) ([]hostPort, error) {
	addrs, err := d.resolve(ctx)
	if err != nil {
		at := ""
		if d.Nameserver != "" {
			// The resolver's own errors name the system's nameserver,
			// which was not asked.
			at = " at " + d.Nameserver
		}
		return nil, fmt.Errorf("plugin: resolve %s%s: %w", d.Name, at, err)
	}
	return addrs, nil
}

func (d *DNSDiscovery) resolve(ctx context.Context) ([]hostPort, error) {
	r := d.resolver()
	var out []hostPort
	switch d.Record {
	case RecordSRV:
		_, srvs, err := r.LookupSRV(ctx, "", "", d.Name)
		if err != nil {
			return nil, err
		}
		for _, s := range srvs {
			ips, err := r.LookupNetIP(ctx, "ip4", strings.TrimSuffix(s.Target, "."))
			if err != nil {
				return nil, fmt.Errorf("SRV target %s: %w", s.Target, err)
			}
			out = appendAddrs(out, ips, int(s.Port))
		}
	default:
		ips, err := r.LookupNetIP(ctx, "ip4", d.Name)
		if err != nil {
			return nil, err
		}
		out = appendAddrs(out, ips, d.Port)
	}
	if len(out) == 0 {
		return nil, errNoAddresses
	}
	slices.SortFunc(out, func(a, b hostPort) int {
		return cmp.Or(cmp.Compare(a.host, b.host), cmp.Compare(a.port, b.port))
	})
	return slices.Compact(out), nil
}

func appendAddrs(out []hostPort, ips []netip.Addr, port int) []hostPort {
	for _, ip := range ips {
		out = append(out, hostPort{ip.Unmap().String(), port})
	}
	return out
}

// discovery is the state of Config.Discovery's refreshes, owned by the
// goroutine that runs them (Initialize's first).
type discovery struct {
	applied []hostPort // the addresses of the replicas set last
	failing bool       // the last refresh failed (logged once per spell)
}

// refreshDiscovery resolves the replicas and sets them when they changed.
func (p *Plugin) refreshDiscovery(ctx context.Context) error {
	d := p.cfg.Discovery
	ctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	addrs, err := d.lookup(ctx)
	if err == nil && !slices.Equal(addrs, p.discovery.applied) {
		replicas := slices.Clone(p.cfg.Replicas)
		for _, a := range addrs {
			replicas = append(replicas, Replica{Name: a.String(), Dialector: d.Dialector(a.host, a.port)})
		}
		if err = p.setReplicas(ctx, replicas); err == nil {
			p.discovery.applied = addrs
		}
	}
	if err != nil {
		if errors.Is(err, ErrClosed) {
			return err
		}
		p.stats.discoveryFailures.Add(1)
		if !p.discovery.failing {
			p.discovery.failing = true
			p.cfg.Logger.WarnContext(ctx, "freshread: replica discovery failed; the replicas stay as they are until a lookup succeeds",
				"name", d.Name, "err", err)
		}
		return err
	}
	if p.discovery.failing {
		p.discovery.failing = false
		p.cfg.Logger.InfoContext(ctx, "freshread: replica discovery works again", "name", d.Name, "replicas", len(addrs))
	}
	return nil
}

// discover refreshes the discovered replicas every Interval (sooner after
// a failure) until the plugin closes.
func (p *Plugin) discover(lastErr error) {
	defer p.wg.Done()
	d := p.cfg.Discovery
	for {
		wait := d.Interval
		if lastErr != nil {
			wait = min(wait, discoveryRetry)
		}
		t := time.NewTimer(wait)
		select {
		case <-p.stop:
			t.Stop()
			return
		case <-t.C:
		}
		lastErr = p.refreshDiscovery(p.lifetime())
	}
}
