package redirect

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// The rules at work, in network namespaces the test creates (root only):
// a connection from an ordinary user to a service's virtual IP lands on
// the proxy's outbound port, with its original destination recoverable
// (what Envoy's original_dst listener filter reads); the proxy's own
// connections, excluded users, ports and CIDRs go where they were headed;
// inbound connections from another host land on the inbound port; and
// -remove leaves no rule.

const (
	proxyUID   = 5678
	excludeUID = 4321
	nobodyUID  = 65534
	vip        = "240.0.0.7" // a Consul virtual IP (240.0.0.0/4)
)

// needNetAdmin skips (fails under CI=true) unless the test can create
// namespaces and run iptables: `make test` installs Debian's iptables
// (scripts/install-iptables.sh).
func needNetAdmin(t *testing.T) {
	t.Helper()
	miss := func(why string) {
		t.Helper()
		if ciTrue() {
			t.Fatalf("%s (CI=true: make test runs scripts/install-iptables.sh, as root)", why)
		}
		t.Skipf("%s; run as root after scripts/install-iptables.sh", why)
	}
	if os.Geteuid() != 0 {
		miss("needs root for network namespaces and iptables")
	}
	for _, bin := range []string{"iptables", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			miss(bin + " is not installed")
		}
	}
}

// ciTrue reports CI=true as make test's scripts read it.
func ciTrue() bool {
	switch os.Getenv("CI") {
	case "1", "t", "T", "true", "TRUE", "True":
		return true
	}
	return false
}

// netns creates a network namespace with loopback up and returns its path.
func netns(t *testing.T, name string) string {
	t.Helper()
	name = fmt.Sprintf("xdsb-%s-%d", name, os.Getpid())
	_ = exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		// Root without CAP_SYS_ADMIN (an unprivileged container).
		why := fmt.Sprintf("cannot create a network namespace: %v: %s", err, strings.TrimSpace(string(out)))
		if ciTrue() {
			t.Fatal(why + " (CI=true)")
		}
		t.Skip(why)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	sh(t, "ip", "-n", name, "link", "set", "lo", "up")
	return "/var/run/netns/" + name
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// listen opens a TCP listener inside the namespace.
func listen(t *testing.T, ns, addr string) *net.TCPListener {
	t.Helper()
	var l net.Listener
	if err := Do(ns, func() (err error) { l, err = net.Listen("tcp4", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l.(*net.TCPListener)
}

// dialAs connects to addr from a child process (bash's /dev/tcp) running
// as uid inside the namespace, reporting whether the connection was made.
func dialAs(t *testing.T, ns string, uid uint32, addr netip.AddrPort) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	derr := Do(ns, func() error {
		cmd := exec.CommandContext(ctx, "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%d", addr.Addr(), addr.Port()))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		err = cmd.Run()
		return nil
	})
	if derr != nil {
		t.Fatal(derr)
	}
	return err == nil
}

// accepted returns the original destination of the next connection l
// accepts, or fails if none comes.
func accepted(t *testing.T, l *net.TCPListener) netip.AddrPort {
	t.Helper()
	_ = l.SetDeadline(time.Now().Add(3 * time.Second))
	c, err := l.AcceptTCP()
	if err != nil {
		t.Fatalf("no connection on %s: %v", l.Addr(), err)
	}
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var orig netip.AddrPort
	var gerr error
	_ = raw.Control(func(fd uintptr) {
		// SO_ORIGINAL_DST fills a sockaddr_in, read through the 20-byte
		// IPv6Mreq as every Go user of it does.
		m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			gerr = err
			return
		}
		a := m.Multiaddr
		orig = netip.AddrPortFrom(netip.AddrFrom4([4]byte{a[4], a[5], a[6], a[7]}), binary.BigEndian.Uint16(a[2:4]))
	})
	if gerr != nil {
		t.Fatalf("SO_ORIGINAL_DST: %v", gerr)
	}
	return orig
}

// noneAccepted checks that l has no connection waiting.
func noneAccepted(t *testing.T, l *net.TCPListener, what string) {
	t.Helper()
	_ = l.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if c, err := l.AcceptTCP(); err == nil {
		c.Close()
		t.Errorf("%s: redirected to %s, want it left alone", what, l.Addr())
	}
}

func TestRedirectTrafficInNetns(t *testing.T) {
	needNetAdmin(t)
	ctx := context.Background()
	proxy := netns(t, "proxy")
	client := netns(t, "client")
	pname, cname := strings.TrimPrefix(proxy, "/var/run/netns/"), strings.TrimPrefix(client, "/var/run/netns/")
	// Virtual IPs are answered locally in the proxy's namespace (so a
	// connection that is not redirected is refused, not lost), and a
	// veth pair links the client's namespace to it for inbound traffic.
	sh(t, "ip", "-n", pname, "route", "add", "local", "240.0.0.0/4", "dev", "lo", "table", "local")
	sh(t, "ip", "link", "add", "xdsbc"+fmt.Sprint(os.Getpid()%10000), "netns", cname, "type", "veth", "peer", "name", "xdsbp", "netns", pname)
	cif := "xdsbc" + fmt.Sprint(os.Getpid()%10000)
	sh(t, "ip", "-n", cname, "addr", "add", "10.213.0.1/30", "dev", cif)
	sh(t, "ip", "-n", pname, "addr", "add", "10.213.0.2/30", "dev", "xdsbp")
	sh(t, "ip", "-n", cname, "link", "set", cif, "up")
	sh(t, "ip", "-n", pname, "link", "set", "xdsbp", "up")

	run := InNetns(proxy, Exec(""))
	cfg := Config{
		ProxyUID: fmt.Sprint(proxyUID), InboundPort: 21000, OutboundPort: 15001,
		ExcludeInboundPorts:  []string{"2222"},
		ExcludeOutboundPorts: []string{"9999"}, ExcludeOutboundCIDRs: []string{"240.0.0.9/32"},
		ExcludeUIDs: []string{fmt.Sprint(excludeUID)},
	}
	if err := Install(ctx, run, cfg); err != nil {
		t.Fatal(err)
	}
	once, err := List(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	// The table as iptables prints it: Consul's chains and rule order.
	want := []string{
		"-N CONSUL_DNS_REDIRECT",
		"-N CONSUL_PROXY_INBOUND",
		"-N CONSUL_PROXY_IN_REDIRECT",
		"-N CONSUL_PROXY_OUTPUT",
		"-N CONSUL_PROXY_REDIRECT",
		"-A PREROUTING -p tcp -j CONSUL_PROXY_INBOUND",
		"-A OUTPUT -p tcp -j CONSUL_PROXY_OUTPUT",
		"-A CONSUL_PROXY_INBOUND -p tcp -m tcp --dport 2222 -j RETURN",
		"-A CONSUL_PROXY_INBOUND -p tcp -j CONSUL_PROXY_IN_REDIRECT",
		"-A CONSUL_PROXY_IN_REDIRECT -p tcp -j REDIRECT --to-ports 21000",
		"-A CONSUL_PROXY_OUTPUT -m owner --uid-owner 4321 -j RETURN",
		"-A CONSUL_PROXY_OUTPUT -d 240.0.0.9/32 -j RETURN",
		"-A CONSUL_PROXY_OUTPUT -p tcp -m tcp --dport 9999 -j RETURN",
		"-A CONSUL_PROXY_OUTPUT -m owner --uid-owner 5678 -j RETURN",
		"-A CONSUL_PROXY_OUTPUT -d 127.0.0.1/32 -j RETURN",
		"-A CONSUL_PROXY_OUTPUT -j CONSUL_PROXY_REDIRECT",
		"-A CONSUL_PROXY_REDIRECT -p tcp -j REDIRECT --to-ports 15001",
	}
	if d := cmp.Diff(want, Ours(once)); d != "" {
		t.Errorf("nat table (-want +got):\n%s", d)
	}

	outbound := listen(t, proxy, "127.0.0.1:15001")
	inbound := listen(t, proxy, "0.0.0.0:21000")
	target := netip.MustParseAddrPort(vip + ":8080")

	// An ordinary user dialing the virtual IP reaches the outbound
	// listener, which can tell where the connection was headed.
	if !dialAs(t, proxy, nobodyUID, target) {
		t.Fatalf("uid %d: dial %s failed; want it redirected to the outbound port", nobodyUID, target)
	}
	if got := accepted(t, outbound); got != target {
		t.Errorf("original destination %s, want %s", got, target)
	}
	// The proxy itself, an excluded user, port and CIDR: not redirected
	// (nothing listens on the virtual IP, so refused).
	for _, x := range []struct {
		what string
		uid  uint32
		to   netip.AddrPort
	}{
		{"the proxy's uid", proxyUID, target},
		{"an excluded uid", excludeUID, target},
		{"an excluded port", nobodyUID, netip.MustParseAddrPort(vip + ":9999")},
		{"an excluded CIDR", nobodyUID, netip.MustParseAddrPort("240.0.0.9:8080")},
	} {
		if dialAs(t, proxy, x.uid, x.to) {
			t.Errorf("%s (uid %d to %s) connected; want refused", x.what, x.uid, x.to)
		}
		noneAccepted(t, outbound, x.what)
	}

	// Inbound from the other namespace: any port but the excluded ones
	// lands on the inbound listener.
	if !dialAs(t, client, 0, netip.MustParseAddrPort("10.213.0.2:8080")) {
		t.Fatal("inbound dial to 10.213.0.2:8080 failed; want it redirected to the inbound port")
	}
	if got := accepted(t, inbound); got != netip.MustParseAddrPort("10.213.0.2:8080") {
		t.Errorf("inbound original destination %s", got)
	}
	if dialAs(t, client, 0, netip.MustParseAddrPort("10.213.0.2:2222")) {
		t.Error("inbound to the excluded port 2222 connected; want refused")
	}
	noneAccepted(t, inbound, "excluded inbound port")

	// Installing again (other settings) leaves one set of rules.
	cfg.ExcludeUIDs = nil
	if err := Install(ctx, run, cfg); err != nil {
		t.Fatalf("second install: %v", err)
	}
	again, _ := List(ctx, run)
	if n := strings.Count(strings.Join(again, "\n"), "-A OUTPUT -p tcp -j CONSUL_PROXY_OUTPUT"); n != 1 {
		t.Errorf("%d jumps from OUTPUT after a second install, want 1", n)
	}
	if slices.Contains(again, "-A CONSUL_PROXY_OUTPUT -m owner --uid-owner 4321 -j RETURN") {
		t.Error("the first install's exclusion survived the second")
	}

	// -remove: no rule left, and traffic goes where it was headed.
	if err := Remove(ctx, run); err != nil {
		t.Fatal(err)
	}
	after, _ := List(ctx, run)
	if o := Ours(after); len(o) > 0 {
		t.Errorf("left after remove: %q", o)
	}
	for _, l := range after {
		if !strings.HasPrefix(l, "-P ") {
			t.Errorf("rule left after remove: %q", l)
		}
	}
	if dialAs(t, proxy, nobodyUID, target) {
		t.Error("after remove, the virtual IP still connects")
	}
	noneAccepted(t, outbound, "after remove")
	if err := Remove(ctx, run); err != nil {
		t.Errorf("removing twice: %v", err)
	}
}
