"""The report page's own scripts and its Content-Security-Policy: plotly.js inlined once, then
the script that draws every figure and sorts the tables; the page asks the network for nothing."""
from __future__ import annotations

import base64
import hashlib

# draws every figure; sorts a table.sortable by the clicked column: numbers by data-v, text otherwise
DRAW = """
(function(){
var data=JSON.parse(document.getElementById('tracelab-figures').textContent);
var cfg={displaylogo:false,responsive:true};
var made=Object.keys(data).map(function(id){
  var f=data[id];return Plotly.newPlot(document.getElementById(id),f.data,f.layout,cfg);});
Promise.all(made).then(function(){document.body.setAttribute('data-plots',String(made.length));
  document.body.setAttribute('data-render-ms',String(Math.round(performance.now())));
  document.body.setAttribute('data-height',String(document.documentElement.scrollHeight));});
document.querySelectorAll('table.sortable').forEach(function(t){
  t.querySelectorAll('th').forEach(function(th,col){th.addEventListener('click',function(){
    var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows);
    var dir=th.getAttribute('data-dir')==='desc'?1:-1;th.setAttribute('data-dir',dir<0?'desc':'asc');
    rows.sort(function(a,b){var x=a.cells[col],y=b.cells[col];
      var u=x.getAttribute('data-v'),v=y.getAttribute('data-v');
      if(u!==null&&v!==null)return dir*(parseFloat(u)-parseFloat(v));
      return dir*x.textContent.localeCompare(y.textContent);});
    rows.forEach(function(r){body.appendChild(r);});});});});
})();
"""


def _scripts() -> list[str]:
    from plotly.offline import get_plotlyjs

    return [get_plotlyjs(), DRAW]


def scripts_html() -> str:
    """plotly.js, then the script that draws the figures."""
    return "".join(f"<script>{code}</script>" for code in _scripts())


def policy() -> str:
    """Content-Security-Policy: no network at all, and only our own scripts run (by hash),
    so neither an injected <script> nor an inline handler (onerror=...) could."""
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'" for s in _scripts())
    return (f"default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; "
            "img-src data: blob:; font-src data:; connect-src 'none'")
