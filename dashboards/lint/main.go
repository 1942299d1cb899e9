// Command dashlint checks Grafana dashboards with the rules of Grafana's dashboard-linter
// (github.com/grafana/dashboard-linter, lint/rule_*.go), ported rule by rule with the same
// names, messages and the same PromQL parser, for machines where that module cannot be fetched.
// The LogQL rules are left out: tcpvigil's dashboards have no Loki targets.
//
//	go run ./dashboards/lint --strict dashboards/*.json
//
// Exceptions are read from a `.lint` file beside the dashboards, in dashboard-linter's format.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"golang.org/x/text/cases"
	"golang.org/x/text/language"
	"gopkg.in/yaml.v3"
)

type Result struct {
	Rule, Dashboard, Panel, Message string
	Target                          int
	Warning                         bool
}

type linter struct {
	results []Result
	d       *Dashboard
}

func (l *linter) add(rule string, p *Panel, t *Target, warn bool, msg string) {
	r := Result{Rule: rule, Dashboard: l.d.Title, Target: -1, Warning: warn}
	switch {
	case t != nil:
		r.Panel, r.Target = p.Title, t.Idx
		r.Message = fmt.Sprintf("Dashboard '%s', panel '%s', target idx '%d' %s", l.d.Title, p.Title, t.Idx, msg)
	case p != nil:
		r.Panel = p.Title
		r.Message = fmt.Sprintf("Dashboard '%s', panel '%s' %s", l.d.Title, p.Title, msg)
	default:
		r.Message = fmt.Sprintf("Dashboard '%s' %s", l.d.Title, msg)
	}
	l.results = append(l.results, r)
}

var titleCase = cases.Title(language.English)

func (l *linter) dashboardRules() {
	d := l.d
	ds := d.templatesOfType("datasource")
	if len(ds) == 0 {
		l.add("template-datasource-rule", nil, nil, false, "does not have a templated data source")
	}
	for _, t := range ds {
		uid, name := strings.ToLower(t.Query)+"_datasource", titleCase.String(t.Query)+" data source"
		okUID, okName := t.Name == uid, t.Label == name
		uidErr := fmt.Sprintf("templated data source variable named '%s', should be named '%s'", t.Name, uid)
		nameErr := fmt.Sprintf("templated data source variable labeled '%s', should be labeled '%s'", t.Label, name)
		if len(ds) == 1 {
			okUID, okName = okUID || t.Name == "datasource", okName || t.Label == "Data source"
			uidErr += ", or 'datasource'"
			nameErr += ", or 'Data source'"
		}
		if !okUID {
			l.add("template-datasource-rule", nil, nil, false, uidErr)
		}
		if !okName {
			l.add("template-datasource-rule", nil, nil, true, nameErr)
		}
	}
	if d.promDS() {
		for _, name := range []string{"job", "instance"} {
			rule := "template-" + name + "-rule"
			t := d.template(name)
			if t == nil {
				l.add(rule, nil, nil, false, fmt.Sprintf("is missing the %s template", name))
				continue
			}
			uid, err := dsUID(t.Datasource)
			if err != nil {
				l.add(rule, nil, nil, false, fmt.Sprintf("%s template has invalid datasource %v", name, err))
			}
			switch uid {
			case "$datasource", "${datasource}", "$prometheus_datasource", "${prometheus_datasource}":
			default:
				l.add(rule, nil, nil, false, fmt.Sprintf("%s template should use datasource '$datasource', is currently '%s'", name, uid))
			}
			if t.Type != "query" {
				l.add(rule, nil, nil, false, fmt.Sprintf("%s template should be a Prometheus query, is currently '%s'", name, t.Type))
			}
			if want := titleCase.String(name); t.Label != want {
				l.add(rule, nil, nil, true, fmt.Sprintf("%s template should be a labeled '%s', is currently '%s'", name, want, t.Label))
			}
			if !t.Multi {
				l.add(rule, nil, nil, false, fmt.Sprintf("%s template should be a multi select", name))
			}
			if t.AllValue != ".+" {
				l.add(rule, nil, nil, false, fmt.Sprintf("%s template allValue should be '.+', is currently '%s'", name, t.AllValue))
			}
		}
		labelRe := regexp.MustCompile(`([a-z_]+)\((.+)\)`)
		for _, t := range d.Templating.List {
			if t.Type != "query" {
				continue
			}
			tok := labelRe.FindStringSubmatch(t.Query)
			var err error
			switch {
			case tok == nil:
				err = fmt.Errorf("invalid 'query': %v", t.Query)
			case tok[1] != "label_names" && tok[1] != "label_values" && tok[1] != "metrics" && tok[1] != "query_result":
				err = fmt.Errorf("invalid 'function': %v", tok[1])
			default:
				// As upstream: a parse that yields an expression passes (label_values(m, label)
				// parses as far as the metric, then stops at the comma).
				var e parser.Expr
				if e, err = parsePromQL(tok[2], d.Templating.List); e != nil {
					err = nil
				}
			}
			if err != nil {
				l.add("template-label-promql-rule", nil, nil, false, fmt.Sprintf("template '%s' invalid templated label '%s': %v", t.Name, t.Query, err))
			}
		}
	}
	for _, t := range d.Templating.List {
		if t.Type == "query" && t.Refresh != 2 {
			l.add("template-on-time-change-reload-rule", nil, nil, false,
				fmt.Sprintf("templated datasource variable named '%s', should be set to be refreshed 'On Time Range Change (value 2)', is currently '%d'", t.Name, t.Refresh))
		}
	}
	if d.Editable {
		l.add("uneditable-dashboard", nil, nil, false, "is editable, it should be set to 'editable: false'")
	}
}

func in(s string, set ...string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}

func (l *linter) panelRules(p *Panel) {
	d := l.d
	if in(p.Type, "singlestat", "graph", "table", "timeseries") {
		ok := map[string]bool{}
		for _, t := range d.templatesOfType("datasource") {
			ok["$"+t.Name], ok["${"+t.Name+"}"] = true, true
		}
		uid, err := dsUID(p.Datasource)
		if err != nil {
			l.add("panel-datasource-rule", p, nil, false, fmt.Sprintf("has invalid datasource: %v'", err))
		}
		if !ok[uid] {
			l.add("panel-datasource-rule", p, nil, false, fmt.Sprintf("does not use a templated datasource, uses '%s'", uid))
		}
	}
	if in(p.Type, "stat", "singlestat", "graph", "table", "timeseries", "gauge") {
		if p.Title == "" || p.Description == "" {
			l.add("panel-title-description-rule", p, nil, false, fmt.Sprintf("has missing title or description, currently has title '%s' and description: '%s'", p.Title, p.Description))
		}
		unit, mapped := "", false
		if fc := p.FieldConfig; fc != nil {
			for _, o := range fc.Overrides {
				for _, pr := range o.Properties {
					if pr.ID == "unit" {
						unit, _ = pr.Value.(string)
					}
					if pr.ID == "mappings" {
						mapped = true
					}
				}
			}
			if unit == "" {
				unit = fc.Defaults.Unit
			}
			if m, ok := fc.Defaults.Mappings.([]any); ok && len(m) > 0 {
				mapped = true
			}
		}
		if !mapped && !validUnits[unit] {
			l.add("panel-units-rule", p, nil, false, fmt.Sprintf("has no or invalid units defined: '%s'", unit))
		}
		if p.Targets == nil {
			l.add("panel-no-targets-rule", p, nil, false, "has no targets")
		}
	}
	for i := range p.Targets {
		t := &p.Targets[i]
		t.Idx = i
		l.targetRules(p, t)
	}
}

var rateInterval, _ = time.ParseDuration(globals["__rate_interval"])

func (l *linter) targetRules(p *Panel, t *Target) {
	d := l.d
	if !d.promDS() {
		return
	}
	expr, err := parsePromQL(t.Expr, d.Templating.List)
	queries := in(p.Type, "singlestat", "gauge", "table", "stat", "state-timeline", "timeseries")
	if queries && err != nil {
		l.add("target-promql-rule", p, t, false, fmt.Sprintf("invalid PromQL query '%s': %v", t.Expr, err))
	}
	if err != nil {
		return
	}
	if queries {
		walk(expr, func(n parser.Node, path []parser.Node) error {
			ms, ok := n.(*parser.MatrixSelector)
			if !ok || ms.Range == rateInterval || len(path) == 0 {
				return nil
			}
			if c, ok := path[len(path)-1].(*parser.Call); ok && in(c.Func.Name, "rate", "irate") {
				return fmt.Errorf("invalid PromQL query '%s': should use $__rate_interval", t.Expr)
			}
			return nil
		}, func(e error) { l.add("target-rate-interval-rule", p, t, false, e.Error()) })
	}
	for _, name := range []string{"job", "instance"} {
		for _, sel := range parser.ExtractSelectors(expr) {
			if e := checkMatcher(sel, name, "$"+name); e != nil {
				l.add("target-"+name+"-rule", p, t, false, fmt.Sprintf("invalid PromQL query '%s': %v", t.Expr, e))
			}
		}
	}
	walk(expr, func(n parser.Node, path []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok || !strings.HasSuffix(vs.String(), "_total") {
			return nil
		}
		bad := fmt.Errorf("counter metric '%s' is not aggregated with rate, irate, or increase", n.String())
		if len(path) < 2 {
			return bad
		}
		if _, ok := path[len(path)-1].(*parser.MatrixSelector); !ok {
			return bad
		}
		if c, ok := path[len(path)-2].(*parser.Call); !ok || !in(c.Func.Name, "rate", "irate", "increase") {
			return bad
		}
		return nil
	}, func(e error) { l.add("target-counter-agg-rule", p, t, false, e.Error()) })
}

type visitor func(parser.Node, []parser.Node) error

func (v visitor) Visit(n parser.Node, path []parser.Node) (parser.Visitor, error) {
	if err := v(n, path); err != nil {
		return nil, err
	}
	return v, nil
}

func walk(e parser.Expr, f func(parser.Node, []parser.Node) error, report func(error)) {
	if err := parser.Walk(visitor(f), e, nil); err != nil {
		report(err)
	}
}

func checkMatcher(sel []*labels.Matcher, name, value string) error {
	res := fmt.Errorf("%s selector not found", name)
	for _, m := range sel {
		if m.Name != name {
			continue
		}
		if m.Type == labels.MatchRegexp && m.Value == value {
			return nil
		}
		if m.Type != labels.MatchRegexp {
			res = fmt.Errorf("%s selector is %s, not %s", name, m.Type, labels.MatchRegexp)
		}
		if m.Value != value {
			res = fmt.Errorf("%s selector is %s, not %s", name, m.Value, value)
		}
	}
	return res
}

// The `.lint` exclusions file, as dashboard-linter reads it.
type entry struct {
	Reason    string `yaml:"reason"`
	Dashboard string `yaml:"dashboard"`
	Panel     string `yaml:"panel"`
	TargetIdx string `yaml:"targetIdx"`
}

type ruleEntries struct {
	Reason  string  `yaml:"reason"`
	Entries []entry `yaml:"entries"`
}

type config struct {
	Exclusions map[string]*ruleEntries `yaml:"exclusions"`
	Warnings   map[string]*ruleEntries `yaml:"warnings"`
}

func matches(m map[string]*ruleEntries, r Result) bool {
	es, ok := m[r.Rule]
	if !ok {
		return false
	}
	if es == nil || len(es.Entries) == 0 {
		return true
	}
	for _, e := range es.Entries {
		if (e.Dashboard == "" || e.Dashboard == r.Dashboard) && (e.Panel == "" || r.Panel == "" || e.Panel == r.Panel) &&
			(e.TargetIdx == "" || r.Target < 0 || e.TargetIdx == fmt.Sprint(r.Target)) {
			return true
		}
	}
	return false
}

func main() {
	strict := flag.Bool("strict", false, "fail upon linting error or warning")
	cfgPath := flag.String("c", "", "path to a configuration file (default: .lint beside the first dashboard)")
	verbose := flag.Bool("verbose", false, "show excluded results too")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: dashlint [--strict] [-c .lint] dashboard.json...")
		os.Exit(2)
	}
	if *cfgPath == "" {
		*cfgPath = filepath.Join(filepath.Dir(flag.Arg(0)), ".lint")
	}
	var cfg config
	if b, err := os.ReadFile(*cfgPath); err == nil {
		if err := yaml.Unmarshal(b, &cfg); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", *cfgPath, err)
			os.Exit(2)
		}
	}
	failed := false
	for _, path := range flag.Args() {
		b, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		var d Dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(2)
		}
		l := &linter{d: &d}
		l.dashboardRules()
		for _, p := range d.panels() {
			p := p
			l.panelRules(&p)
		}
		for _, r := range l.results {
			sev := "error"
			if r.Warning || matches(cfg.Warnings, r) {
				sev = "warning"
			}
			if matches(cfg.Exclusions, r) {
				if *verbose {
					fmt.Printf("[excluded] %s: %s\n", r.Rule, r.Message)
				}
				continue
			}
			fmt.Printf("[%s] %s: %s\n", sev, r.Rule, r.Message)
			if sev == "error" || *strict {
				failed = true
			}
		}
		fmt.Printf("%s: %d panels checked\n", path, len(d.panels()))
	}
	if failed {
		os.Exit(1)
	}
}
