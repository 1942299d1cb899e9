// The units panel-units-rule accepts: Grafana's value formats, as dashboard-linter lists them
// (lint/rule_panel_units.go, enumerated from grafana-data/src/valueFormats/categories.ts).
package main

var validUnits = map[string]bool{}

func init() {
	for _, u := range []string{
		"none",
		"string",
		"short", "percent", "percentunit", "humidity", "dB", "hex0x", "hex", "sci", "locale", "pixel",
		"accMS2", "accFS2", "accG",
		"degree", "radian", "grad", "arcmin", "arcsec",
		"areaM2", "areaF2", "areaMI2",
		"flops", "mflops", "gflops", "tflops", "pflops", "eflops", "zflops", "yflops",
		"ppm", "conppb", "conngm3", "conngNm3", "conμgm3", "conμgNm3", "conmgm3", "conmgNm3", "congm3", "congNm3", "conmgdL", "conmmolL",
		"currencyUSD", "currencyGBP", "currencyEUR", "currencyJPY", "currencyRUB", "currencyUAH", "currencyBRL", "currencyDKK", "currencyISK", "currencyNOK", "currencySEK", "currencyCZK", "currencyCHF", "currencyPLN", "currencyBTC", "currencymBTC", "currencyμBTC", "currencyZAR", "currencyINR", "currencyKRW", "currencyIDR", "currencyPHP", "currencyVND",
		"bytes", "decbytes", "bits", "decbits", "kbytes", "deckbytes", "mbytes", "decmbytes", "gbytes", "decgbytes", "tbytes", "dectbytes", "pbytes", "decpbytes",
		"pps", "binBps", "Bps", "binbps", "bps", "KiBs", "Kibits", "KBs", "Kbits", "MiBs", "Mibits", "MBs", "Mbits", "GiBs", "Gibits", "GBs", "Gbits", "TiBs", "Tibits", "TBs", "Tbits", "PiBs", "Pibits", "PBs", "Pbits",
		"dateTimeAsIso", "dateTimeAsIsoNoDateIfToday", "dateTimeAsUS", "dateTimeAsUSNoDateIfToday", "dateTimeAsLocal",
		"dateTimeAsLocalNoDateIfToday", "dateTimeAsSystem", "dateTimeFromNow",
		"watt", "kwatt", "megwatt", "gwatt", "mwatt", "Wm2", "voltamp", "kvoltamp", "voltampreact", "kvoltampreact", "watth", "watthperkg", "kwatth", "kwattm", "amph", "kamph", "mamph", "joule", "ev", "amp", "kamp", "mamp", "volt", "kvolt", "mvolt", "dBm", "ohm", "kohm", "Mohm", "farad", "µfarad", "nfarad", "pfarad", "ffarad", "henry", "mhenry", "µhenry", "lumens",
		"flowgpm", "flowcms", "flowcfs", "flowcfm", "litreh", "flowlpm", "flowmlpm", "lux",
		"forceNm", "forcekNm", "forceN", "forcekN",
		"Hs", "KHs", "MHs", "GHs", "THs", "PHs", "EHs",
		"massmg", "massg", "masslb", "masskg", "masst",
		"lengthmm", "lengthin", "lengthft", "lengthm", "lengthkm", "lengthmi",
		"pressurembar", "pressurebar", "pressurekbar", "pressurepa", "pressurehpa", "pressurekpa", "pressurehg", "pressurepsi",
		"radbq", "radci", "radgy", "radrad", "radsv", "radmsv", "radusv", "radrem", "radexpckg", "radr", "radsvh", "radmsvh", "radusvh",
		"rotrpm", "rothz", "rotrads", "rotdegs",
		"celsius", "fahrenheit", "kelvin",
		"hertz", "ns", "µs", "ms", "s", "m", "h", "d", "dtdurationms", "dtdurations", "dthms", "dtdhms", "timeticks", "clockms", "clocks",
		"cps", "ops", "reqps", "rps", "wps", "iops", "cpm", "opm", "rpm", "wpm", "mps", "mpm",
		"velocityms", "velocitykmh", "velocitymph", "velocityknot",
		"mlitre", "litre", "m3", "Nm3", "dm3", "gallons",
		"bool", "bool_yes_no", "bool_on_off",
	} {
		validUnits[u] = true
	}
}
