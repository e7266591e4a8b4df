package plan

import (
	"slices"
	"strings"
	"testing"
)

func TestFieldDiff(t *testing.T) {
	old := []byte(`{"name":"r","routes":[{"w":80,"m":{"prefix":"/"}},{"w":20}],"gone":true}`)
	new := []byte(`{"name":"r","routes":[{"w":50,"m":{"prefix":"/"}},{"w":50},{"w":1}],"added":"x"}`)
	want := []string{
		`+ added: "x"`,
		`- gone: true`,
		`~ routes[0].w: 80 → 50`,
		`~ routes[1].w: 20 → 50`,
		`+ routes[2]: {"w":1}`,
	}
	if got := fieldDiff(old, new); !slices.Equal(got, want) {
		t.Errorf("fieldDiff:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var many []string
	for i := range 40 {
		many = append(many, `"k`+string(rune('a'+i%26))+string(rune('a'+i/26))+`":1`)
	}
	if got := fieldDiff([]byte("{}"), []byte("{"+strings.Join(many, ",")+"}")); len(got) != maxFields+1 || !strings.Contains(got[maxFields], "16 more") {
		t.Errorf("a rewritten resource printed %d lines, last %q", len(got), got[len(got)-1])
	}
}
