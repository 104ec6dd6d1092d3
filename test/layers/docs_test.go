package layers

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// architectureDoc is the document whose tables say which package owns what.
const architectureDoc = "../../docs/architecture.md"

// tableName matches the first cell of a table row that names packages: one backticked name, perhaps
// followed by words in parentheses ("`controllers` (models)").
var tableName = regexp.MustCompile("^\\| `([^`]+)`( \\([^)]*\\))? \\|")

// namedPackages returns the package paths the first column of the document's tables names. A brace list
// names each of its members ("gatewayd/rest/{groups,apikeys}") and a path ending in "/*" names every package
// under it.
func namedPackages(doc string) []string {
	var names []string
	for _, line := range strings.Split(doc, "\n") {
		m := tableName.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		names = append(names, expandBraces(m[1])...)
	}
	return names
}

func expandBraces(name string) []string {
	open, end := strings.Index(name, "{"), strings.Index(name, "}")
	if open < 0 || end < open {
		return []string{name}
	}
	var out []string
	for _, member := range strings.Split(name[open+1:end], ",") {
		out = append(out, expandBraces(name[:open]+strings.TrimSpace(member)+name[end+1:])...)
	}
	return out
}

// covers reports whether a name from the document stands for pkg.
func covers(name, pkg string) bool {
	if dir, ok := strings.CutSuffix(name, "/*"); ok {
		return strings.HasPrefix(pkg, dir+"/")
	}
	return name == pkg
}

// undocumented returns the packages no name covers, and the names that stand for no package and no
// directory of the module (a row left behind by a move).
func undocumented(names, pkgs []string, isDir func(string) bool) (missing, stale []string) {
	for _, pkg := range pkgs {
		found := false
		for _, n := range names {
			found = found || covers(n, pkg)
		}
		if !found {
			missing = append(missing, pkg)
		}
	}
	for _, n := range names {
		found := false
		for _, pkg := range pkgs {
			found = found || covers(n, pkg)
		}
		if !found && !isDir(n) {
			stale = append(stale, n)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	return missing, stale
}

// TestArchitectureNamesEveryPackage keeps docs/architecture.md the map of the module: every package has a row
// that says what it owns, and no row names a package that is gone.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile(architectureDoc)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		pkgs = append(pkgs, strings.TrimPrefix(p, module))
	}
	isDir := func(name string) bool {
		fi, err := os.Stat(filepath.Join("..", "..", filepath.FromSlash(name)))
		return err == nil && fi.IsDir()
	}
	missing, stale := undocumented(namedPackages(string(doc)), pkgs, isDir)
	for _, p := range missing {
		t.Errorf("package %s has no row in docs/architecture.md: add one that says what it owns", p)
	}
	for _, n := range stale {
		t.Errorf("docs/architecture.md names %s, which is no package or directory of the module", n)
	}
}

func TestUndocumentedFindsMissingAndStaleRows(t *testing.T) {
	doc := strings.Join([]string{
		"| Package | Owns |",
		"|---|---|",
		"| `api/v1alpha1` | types |",
		"| `controllers` (models) | reconcilers |",
		"| `gatewayd/rest/{groups, apikeys}` | routes |",
		"| `cmd/*` | mains |",
		"| `gatewayd/gone` | moved away |",
		"Some `gatewayd/view` in prose is not a row.",
	}, "\n")
	names := namedPackages(doc)
	if want := []string{"api/v1alpha1", "controllers", "gatewayd/rest/groups", "gatewayd/rest/apikeys", "cmd/*", "gatewayd/gone"}; strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("names %q, want %q", names, want)
	}
	pkgs := []string{"api/v1alpha1", "controllers", "gatewayd/rest/groups", "gatewayd/rest/apikeys", "cmd/manager", "gatewayd/view"}
	missing, stale := undocumented(names, pkgs, func(string) bool { return false })
	if strings.Join(missing, " ") != "gatewayd/view" {
		t.Errorf("missing %q, want [gatewayd/view]", missing)
	}
	if strings.Join(stale, " ") != "gatewayd/gone" {
		t.Errorf("stale %q, want [gatewayd/gone]", stale)
	}
}

// TestCitesOnlyItsOwnDocs: the code, tests and docs cite the project's docs/, never a document a clone of the
// repository does not have. The names are built so that this file does not hold them.
func TestCitesOnlyItsOwnDocs(t *testing.T) {
	out, err := exec.Command("git", "-C", "../..", "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	outside := []string{"SPEC" + ".md", "DESIGN" + ".md"}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join("..", "..", name))
		if err != nil {
			continue // listed but gone from the work tree
		}
		for _, o := range outside {
			if strings.Contains(string(b), o) {
				t.Errorf("%s cites %s, which is not in the repository: cite the section of docs/ that states it", name, o)
			}
		}
	}
}
