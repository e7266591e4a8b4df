package envoycompat

import (
	"os"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

func buildVersion(major, minor, patch uint32) *corev3.Node {
	return &corev3.Node{UserAgentName: "envoy", UserAgentVersionType: &corev3.Node_UserAgentBuildVersion{
		UserAgentBuildVersion: &corev3.BuildVersion{Version: &typev3.SemanticVersion{MajorNumber: major, MinorNumber: minor, Patch: patch}},
	}}
}

func TestFromNode(t *testing.T) {
	for name, tc := range map[string]struct {
		node *corev3.Node
		want string // "" for none
	}{
		"build version":           {buildVersion(1, 22, 11), "1.22"},
		"user_agent_version":      {&corev3.Node{UserAgentName: "envoy", UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: "1.31.2"}}, "1.31"},
		"dev build, v prefix":     {&corev3.Node{UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: "v1.40.0-dev"}}, "1.40"},
		"no version":              {&corev3.Node{UserAgentName: "envoy"}, ""},
		"garbage":                 {&corev3.Node{UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: "latest"}}, ""},
		"zero build version":      {buildVersion(0, 0, 0), ""},
		"proxyless gRPC client":   {&corev3.Node{UserAgentName: "grpc-go", UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: "1.66.0"}}, ""},
		"build version preferred": {func() *corev3.Node { n := buildVersion(1, 25, 4); return n }(), "1.25"},
	} {
		t.Run(name, func(t *testing.T) {
			v, ok := FromNode(tc.node)
			got := ""
			if ok {
				got = v.String()
			}
			if got != tc.want {
				t.Errorf("FromNode = %q (ok %v), want %q", got, ok, tc.want)
			}
		})
	}
}

// TestClassOf: versions with the same features share a class; the
// newest (from the last threshold on) and beyond get the translation as
// it is; below the range is the oldest's class.
func TestClassOf(t *testing.T) {
	for v, want := range map[Version]string{
		{1, 20}: "1.22", {1, 22}: "1.22", {1, 23}: "1.23", {1, 25}: "1.23", {1, 26}: "1.26",
		{1, 30}: "1.26", {1, 31}: "1.31", {1, 33}: "1.33", {1, 34}: "1.33", {1, 35}: "1.35", {1, 36}: "1.35",
		{1, 37}: "", {1, 40}: "", {1, 45}: "", {2, 0}: "",
	} {
		if got := ClassOf(v).String(); got != want {
			t.Errorf("ClassOf(%v) = %q, want %q", v, got, want)
		}
		if c := ClassOf(v); ParseClass(c.String()) != c {
			t.Errorf("ParseClass(%q) does not give the class back", c)
		}
	}
	if !ClassOfNode(&corev3.Node{}).Current() {
		t.Error("a node without a version is rewritten for")
	}
	if ClassOf(Newest) != ClassOf(lastThreshold()) || !ClassOf(Newest).Current() {
		t.Error("the newest supported Envoy is rewritten for")
	}
	for _, f := range Features() {
		if f.Since.Less(Oldest) || Newest.Less(f.Since) {
			t.Errorf("feature %q since %v is outside the supported range %v-%v", f.Name, f.Since, Oldest, Newest)
		}
	}
}

// TestSupportMatrixListsEveryFeature: the docs' table names every
// feature with the release that brought it, and the supported range.
func TestSupportMatrixListsEveryFeature(t *testing.T) {
	b, err := os.ReadFile("../../docs/support-matrix.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	_, section, ok := strings.Cut(doc, "## Envoy versions")
	if !ok {
		t.Fatal("docs/support-matrix.md has no Envoy versions section")
	}
	for _, f := range Features() {
		row := "| " + f.Name
		i := strings.Index(section, row)
		if i < 0 {
			t.Errorf("the table has no row for %q", f.Name)
			continue
		}
		line, _, _ := strings.Cut(section[i:], "\n")
		if !strings.Contains(line, "| "+f.Since.String()+" |") {
			t.Errorf("row %q does not give release %v", line, f.Since)
		}
	}
	for _, v := range []Version{Oldest, Newest} {
		if !strings.Contains(section, "**Envoy "+v.String()+"**") {
			t.Errorf("the section does not name Envoy %v as an end of the range", v)
		}
	}
}
