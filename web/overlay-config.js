// The overlay's URL parameters: one table says what each one accepts and its default, so that
// the page, its status line and docs/obs.md agree. A value that is refused is never guessed at:
// the default is used and the status line names what was refused (an OBS user cannot see the
// console). Plain ES2020, no build step.
"use strict";

(() => {
  const enumOf = (...values) => ({
    check: (v) => (values.includes(v) ? v : undefined),
    want: values.join(" | "),
  });
  const number = (lo, hi, integer = false) => ({
    check: (v) => {
      const n = Number(v);
      const ok = v.trim() !== "" && Number.isFinite(n) && n >= lo && n <= hi;
      return ok && (!integer || Number.isInteger(n)) ? n : undefined;
    },
    want: `${integer ? "a whole number" : "a number"} ${lo}-${hi}`,
  });
  // Plain colour syntax only: a name, #hex, or a colour function of numbers. CSS.supports
  // alone is not enough: it is true for any var(...), env(...) or attr(...), and a
  // `var(--x, url(...))` background would ask for a remote image (only the CSP stopped it).
  const PLAIN_COLOUR =
    /^(?:[a-z]{3,30}|#[0-9a-f]{3,8}|(?:rgba?|hsla?|hwb|lab|lch|oklab|oklch)\((?:[\d.\s,/%+-]|e|deg|g?rad|turn|none)*\))$/i;
  const colour = {
    check: (v) => {
      if (v === "none") return "transparent";
      const c = /^[0-9a-f]{3,8}$/i.test(v) ? "#" + v : v;
      return PLAIN_COLOUR.test(c) && CSS.supports("color", c) ? c : undefined;
    },
    want: "a CSS colour (ffcc00, #fc0, rgba(0,0,0,.7), red) or none",
  };
  const flag = enumOf("0", "1");
  const text = { check: (v) => v, want: "text" };
  /** A caption server address: ws(s)://, or http(s):// (the same server's page address). */
  const server = {
    check: (v) => {
      let u;
      try {
        u = new URL(v);
      } catch (_) {
        return undefined;
      }
      const proto = { "ws:": "ws:", "wss:": "wss:", "http:": "ws:", "https:": "wss:" }[u.protocol];
      if (!proto || !u.host) return undefined;
      return `${proto}//${u.host}${u.pathname.replace(/\/+$/, "")}`;
    },
    want: "ws://host:port or wss://host",
  };

  // The default background is dark enough that every default text colour keeps WCAG AA
  // (4.5:1) over a white scene as over a black one (tests/test_overlay_params.py measures it).
  const SPEC = {
    stream: [text, "", "stream to show (required)"],
    token: [text, "", "view token, when the server has one"],
    font: [text, "Arial, Helvetica, sans-serif", "CSS font family"],
    size: [number(8, 400), 40, "font size in px"],
    weight: [number(100, 900), 600, "font weight"],
    color: [colour, "#ffffff", "text colour"],
    bg: [colour, "rgba(0,0,0,0.75)", "box colour behind the text; none: no box"],
    lines: [number(1, 20, true), 2, "lines on screen"],
    position: [enumOf("bottom", "top"), "bottom", "where the box sits"],
    partial: [enumOf("dimmed", "italic", "hidden", "normal"), "dimmed", "how words that may still change look"],
    width: [{ check: (v) => (/^\d{1,4}(px|%|vw)$/.test(v) ? v : undefined), want: "80%, 1200px or 90vw" },
      "80%", "box width"],
    align: [enumOf("center", "left", "right"), "center", "text alignment"],
    margin: [number(0, 2000), 40, "px from the screen edge"],
    outline: [number(0, 20), 0, "px of dark outline around letters"],
    hold: [number(0, 3600), 6, "seconds the last caption stays after its speech; 0: forever"],
    names: [flag, "1", "0 hides speaker names"],
    colors: [flag, "1", "0: names in the text colour"],
    highlight: [enumOf("off", "words"), "off", "words: highlight the word being said"],
    highlight_color: [colour, "#ffd54f", "colour of the highlighted word"],
    server: [server, "", "caption server (default: the page's own)"],
    debug: [text, "", "any value: always show the connection state"],
  };
  /** Parameters whose refusal leaves nothing to show: the page says so instead of connecting. */
  const FATAL = new Set(["server"]);

  /** Read `params` (URLSearchParams) against SPEC: `{cfg, refused, fatal}`. `refused` lists
   *  "name=value (wants ...)" for each value ignored, and unknown names; `fatal` is the message
   *  to show instead of captions (no stream, an unusable server address), or "". */
  function readOverlayParams(params, defaultServer) {
    const cfg = {};
    const refused = [];
    let fatal = "";
    for (const [name, [kind, fallback]] of Object.entries(SPEC)) {
      cfg[name] = fallback;
      if (!params.has(name)) continue;
      const raw = params.get(name).trim();
      if (raw === "" && kind !== text) continue; // `size=` means the default, as if absent
      const value = kind.check(raw);
      if (value === undefined) {
        if (FATAL.has(name)) fatal = `server=${raw} is not a caption server address: use ${kind.want}`;
        else refused.push(`${name}=${raw} (wants ${kind.want}, using ${fallback})`);
      } else {
        cfg[name] = value;
      }
    }
    for (const name of new Set(params.keys())) {
      if (!(name in SPEC)) refused.push(`unknown parameter ${name}`);
    }
    if (!cfg.font) cfg.font = SPEC.font[1];
    if (!cfg.server) cfg.server = defaultServer;
    cfg.names = cfg.names !== "0";
    cfg.colors = cfg.colors !== "0";
    cfg.words = cfg.highlight === "words";
    if (!cfg.stream && !fatal) {
      fatal = "add ?stream=ID to the URL (the mic page shows the overlay link of its stream)";
    }
    return { cfg, refused, fatal };
  }

  window.Streamcap = Object.assign(window.Streamcap || {}, {
    readOverlayParams, OVERLAY_PARAMS: SPEC,
  });
})();
