"""The report page's own scripts and its Content-Security-Policy. plotly.js (about 4.8 MB) travels
deflated and base64-encoded in a data block (about 1.9 MB) that the page inflates as it loads
(INFLATE: RFC 1951 in a few lines, synchronous, so the page's load event still waits for the
figures) and runs from a blob: URL, then draws the figures: the page stays one self-contained
file that asks the network for nothing, at under half the size."""
from __future__ import annotations

import base64
import functools
import hashlib
import zlib

# inflates raw deflate (RFC 1951) into `out`, whose size is known; puff.c's canonical decoding
INFLATE = """
function tracelabInflate(src,out){
var pos=0,buf=0,cnt=0,op=0;
var LB=[3,4,5,6,7,8,9,10,11,13,15,17,19,23,27,31,35,43,51,59,67,83,99,115,131,163,195,227,258],
LE=[0,0,0,0,0,0,0,0,1,1,1,1,2,2,2,2,3,3,3,3,4,4,4,4,5,5,5,5,0],
DB=[1,2,3,4,5,7,9,13,17,25,33,49,65,97,129,193,257,385,513,769,1025,1537,2049,3073,4097,6145,8193,12289,16385,24577],
DE=[0,0,0,0,1,1,2,2,3,3,4,4,5,5,6,6,7,7,8,8,9,9,10,10,11,11,12,12,13,13],
ORDER=[16,17,18,0,8,7,9,6,10,5,11,4,12,3,13,2,14,1,15];
function bits(n){while(cnt<n){buf|=src[pos++]<<cnt;cnt+=8;}var v=buf&((1<<n)-1);buf>>>=n;cnt-=n;return v;}
function build(lens){var c=new Uint16Array(16),s=new Uint16Array(lens.length),o=new Uint16Array(16),i;
  for(i=0;i<lens.length;i++)c[lens[i]]++;c[0]=0;for(i=1;i<16;i++)o[i]=o[i-1]+c[i-1];
  for(i=0;i<lens.length;i++)if(lens[i])s[o[lens[i]]++]=i;return {c:c,s:s};}
function decode(h){var code=0,first=0,index=0;for(var len=1;len<16;len++){code|=bits(1);var n=h.c[len];
  if(code-n<first)return h.s[index+code-first];index+=n;first=(first+n)<<1;code<<=1;}throw new Error('bad code');}
function fixed(){var l=new Uint8Array(288),d=new Uint8Array(30),i;for(i=0;i<288;i++)l[i]=i<144?8:i<256?9:i<280?7:8;
  d.fill(5);return [build(l),build(d)];}
function dynamic(){var nl=bits(5)+257,nd=bits(5)+1,nc=bits(4)+4,cl=new Uint8Array(19),i;
  for(i=0;i<nc;i++)cl[ORDER[i]]=bits(3);var ch=build(cl),lens=new Uint8Array(nl+nd);
  for(i=0;i<nl+nd;){var sym=decode(ch);if(sym<16){lens[i++]=sym;continue;}
    var v=0,rep;if(sym===16){v=lens[i-1];rep=3+bits(2);}else if(sym===17)rep=3+bits(3);else rep=11+bits(7);
    while(rep--)lens[i++]=v;}
  return [build(lens.subarray(0,nl)),build(lens.subarray(nl))];}
var last;do{last=bits(1);var type=bits(2);
  if(type===0){buf=0;cnt=0;var n=src[pos]|src[pos+1]<<8;pos+=4;out.set(src.subarray(pos,pos+n),op);pos+=n;op+=n;continue;}
  var t=type===1?fixed():dynamic();
  for(;;){var sym=decode(t[0]);if(sym<256){out[op++]=sym;continue;}if(sym===256)break;sym-=257;
    var len=LB[sym]+bits(LE[sym]),ds=decode(t[1]),d=DB[ds]+bits(DE[ds]);
    for(var k=0;k<len;k++,op++)out[op]=out[op-d];}}while(!last);
if(op!==out.length)throw new Error('inflated '+op+' bytes, not '+out.length);return out;}
"""

# inflates plotly.js while the page loads, runs it, then draws every figure (window.tracelabDraw)
LOADER = INFLATE + """
(function(){
var el=document.getElementById('tracelab-plotly'),b=atob(el.textContent),u=new Uint8Array(b.length);
for(var i=0;i<b.length;i++)u[i]=b.charCodeAt(i);
var js=tracelabInflate(u,new Uint8Array(parseInt(el.getAttribute('data-bytes'),10)));
var s=document.createElement('script');s.src=URL.createObjectURL(new Blob([js],{type:'text/javascript'}));
s.onload=function(){URL.revokeObjectURL(s.src);window.tracelabDraw();};document.head.appendChild(s);
})();
"""

# draws every figure once plotly.js runs; sorts a table.sortable by the clicked column: numbers
# by data-v, text otherwise
DRAW = """
(function(){
window.tracelabDraw=function(){
var data=JSON.parse(document.getElementById('tracelab-figures').textContent);
var cfg={displaylogo:false,responsive:true};
var made=Object.keys(data).map(function(id){
  var f=data[id];return Plotly.newPlot(document.getElementById(id),f.data,f.layout,cfg);});
Promise.all(made).then(function(){document.body.setAttribute('data-plots',String(made.length));
  document.body.setAttribute('data-render-ms',String(Math.round(performance.now())));
  document.body.setAttribute('data-height',String(document.documentElement.scrollHeight));});};
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
SCRIPTS = (DRAW, LOADER)  # in this order: the loader calls what DRAW defines


@functools.cache
def packed_plotly() -> tuple[str, int]:
    """(plotly.js raw-deflated at level 9 and base64-encoded, its size in bytes)."""
    from plotly.offline import get_plotlyjs

    code = get_plotlyjs().encode()
    pack = zlib.compressobj(9, zlib.DEFLATED, -15)
    return base64.b64encode(pack.compress(code) + pack.flush()).decode("ascii"), len(code)


def scripts_html() -> str:
    """The packed plotly.js as a data block (never run as it is), then the page's scripts."""
    packed, size = packed_plotly()
    return (f'<script type="application/octet-stream" id="tracelab-plotly" data-bytes="{size}">{packed}</script>'
            + "".join(f"<script>{code}</script>" for code in SCRIPTS))


def policy() -> str:
    """Content-Security-Policy: no network at all; only our own inline scripts run (by hash), and
    blob: scripts, which only a running script can make (the inflated plotly.js): neither an
    injected <script> nor an inline handler (onerror=...) could run."""
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'" for s in SCRIPTS)
    return (f"default-src 'none'; script-src {hashes} blob:; style-src 'unsafe-inline'; "
            "img-src data: blob:; font-src data:; connect-src 'none'")
