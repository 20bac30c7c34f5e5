"""The watch page's stylesheet (inlined by page.py)."""

STYLE = """
body { font: 14px system-ui, sans-serif; margin: 0; color: #222; overflow-x: hidden; }
header { padding: 8px 16px; border-bottom: 1px solid #ddd; }
h1 { font-size: 18px; margin: 0 0 4px; overflow-wrap: anywhere; }
h2 { font-size: 15px; margin: 12px 0 6px; }
main { padding: 0 16px 16px; max-width: 100%; box-sizing: border-box; }
#legend { display: flex; flex-wrap: wrap; gap: 4px 14px; align-items: center; margin-top: 6px; }
.sw { display: inline-block; width: 14px; height: 12px; border: 1px solid #888;
  vertical-align: middle; margin-right: 4px; }
.sw.mark { font-size: 11px; line-height: 12px; text-align: center; color: #000; }
#scale { display: inline-block; width: 220px; height: 12px; border: 1px solid #888;
  vertical-align: middle; }
#heat-wrap { display: flex; max-height: 560px; overflow-y: auto; border: 1px solid #ddd; }
#heat-labels { flex: 0 0 200px; font-size: 11px; }
#heat-labels div { white-space: pre; overflow: hidden; text-overflow: ellipsis;
  padding-right: 4px; text-align: right; }
#heat { flex: 1 1 auto; min-width: 0; image-rendering: pixelated; cursor: crosshair;
  background: #fff; }
#heat-axis, #lines { width: 100%; display: block; }
#lines-row { display: flex; gap: 12px; align-items: flex-start; }
#lines { flex: 1 1 auto; min-width: 0; }
#pick-box { flex: 0 0 240px; display: flex; flex-direction: column; font-size: 12px; }
#pick { width: 240px; font-size: 12px; }
#lines-legend { display: flex; flex-wrap: wrap; gap: 2px 14px; font-size: 12px; }
#lines-legend span { white-space: pre; overflow-wrap: anywhere; }
.hint { color: #555; font-size: 12px; margin: 4px 0; }
#tip { position: fixed; pointer-events: none; background: #fff; border: 1px solid #888;
  padding: 4px 6px; font-size: 12px; white-space: pre; max-width: 480px; overflow: hidden;
  box-shadow: 0 1px 4px rgba(0,0,0,.2); z-index: 10; }
table { border-collapse: collapse; font-size: 12px; }
td, th { border-bottom: 1px solid #eee; padding: 2px 8px; text-align: left;
  vertical-align: top; white-space: pre-wrap; overflow-wrap: anywhere; }
svg text { font: 11px system-ui, sans-serif; }
"""
