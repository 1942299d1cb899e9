// The dashboard model dashlint reads: templates, panels and targets as Grafana's JSON has them,
// and template variables expanded to sample values so that PromQL parses.
package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
)

type Template struct {
	Name       string
	Label      string
	Type       string
	Query      string
	Datasource any
	Multi      bool
	AllValue   string
	Refresh    int
	Current    map[string]any
	Options    []map[string]any
}

func (t *Template) UnmarshalJSON(b []byte) error {
	var raw struct {
		Name       string           `json:"name"`
		Label      string           `json:"label"`
		Type       string           `json:"type"`
		Query      any              `json:"query"`
		Datasource any              `json:"datasource"`
		Multi      bool             `json:"multi"`
		AllValue   string           `json:"allValue"`
		Refresh    int              `json:"refresh"`
		Current    map[string]any   `json:"current"`
		Options    []map[string]any `json:"options"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*t = Template{raw.Name, raw.Label, raw.Type, "", raw.Datasource, raw.Multi, raw.AllValue, raw.Refresh, raw.Current, raw.Options}
	switch q := raw.Query.(type) {
	case string:
		t.Query = q
	case map[string]any:
		t.Query, _ = q["query"].(string)
	}
	return nil
}

type Target struct {
	Idx        int    `json:"-"`
	Datasource any    `json:"datasource"`
	Expr       string `json:"expr"`
	PanelID    int    `json:"panelId"`
}

type Panel struct {
	ID          int      `json:"id"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	Type        string   `json:"type"`
	Datasource  any      `json:"datasource"`
	Targets     []Target `json:"targets"`
	Panels      []Panel  `json:"panels"`
	FieldConfig *struct {
		Defaults struct {
			Unit     string `json:"unit"`
			Mappings any    `json:"mappings"`
		} `json:"defaults"`
		Overrides []struct {
			Properties []struct {
				ID    string `json:"id"`
				Value any    `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
	Options json.RawMessage `json:"options"`
}

type Dashboard struct {
	Title      string  `json:"title"`
	Editable   bool    `json:"editable"`
	Panels     []Panel `json:"panels"`
	Rows       []Panel `json:"rows"`
	Templating struct {
		List []Template `json:"list"`
	} `json:"templating"`
}

func flatten(ps []Panel) (out []Panel) {
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

func (d *Dashboard) panels() []Panel { return append(flatten(d.Rows), flatten(d.Panels)...) }

func (d *Dashboard) templatesOfType(t string) (out []Template) {
	for _, x := range d.Templating.List {
		if x.Type == t {
			out = append(out, x)
		}
	}
	return out
}

func (d *Dashboard) template(name string) *Template {
	for i := range d.Templating.List {
		if d.Templating.List[i].Name == name {
			return &d.Templating.List[i]
		}
	}
	return nil
}

// promDS reports whether the dashboard's first datasource template queries Prometheus.
func (d *Dashboard) promDS() bool {
	ds := d.templatesOfType("datasource")
	return len(ds) > 0 && ds[0].Query == "prometheus"
}

func dsUID(raw any) (string, error) {
	switch v := raw.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case map[string]any:
		uid, ok := v["uid"].(string)
		if !ok {
			return "", fmt.Errorf("invalid type for field 'datasource': missing uid field")
		}
		return uid, nil
	}
	return "", fmt.Errorf("invalid type for field 'datasource': %v", raw)
}

// Variable expansion as dashboard-linter's lint/variables.go does it.
var globals = map[string]string{
	"__rate_interval": "8869990787ms", "__interval": "4867856611ms", "__interval_ms": "7781188786",
	"__range_ms": "6737667980", "__range_s": "9397795485", "__range": "6069770749ms", "__auto": "12345ms",
}

var varRe = regexp.MustCompile(`\$([[:word:]]+)|\$\{([^}]+)\}|\[\[([^\[\]]+)\]\]`)

func firstString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []any:
		if len(x) > 0 {
			s, _ := x[0].(string)
			return s
		}
	}
	return ""
}

func sample(name string, vars []Template) string {
	name = strings.SplitN(name, ":", 2)[0]
	if v, ok := globals[name]; ok {
		return v
	}
	if strings.HasPrefix(name, "__auto_interval") {
		return "10s"
	}
	for i, v := range vars {
		if v.Name != name {
			continue
		}
		rest := append(append([]Template{}, vars[:i]...), vars[i+1:]...)
		if c := firstString(v.Current["value"]); c != "" {
			return expand(c, rest)
		}
		if len(v.Options) > 0 {
			return expand(firstString(v.Options[0]["value"]), rest)
		}
	}
	return name
}

func expand(expr string, vars []Template) string {
	parts := strings.Split(expr, `"`)
	for i := 0; i < len(parts); i += 2 {
		parts[i] = varRe.ReplaceAllStringFunc(parts[i], func(m string) string {
			sm := varRe.FindStringSubmatch(m)
			for _, g := range sm[1:] {
				if g != "" {
					return sample(g, vars)
				}
			}
			return m
		})
	}
	return strings.Join(parts, `"`)
}

func parsePromQL(expr string, vars []Template) (parser.Expr, error) {
	return parser.NewParser(parser.Options{}).ParseExpr(expand(expr, vars))
}

// Results.
