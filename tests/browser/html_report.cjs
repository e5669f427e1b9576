// Opens a pi-conform HTML report in headless Chromium (puppeteer-core with the Chromium of
// @sparticuz/chromium), clicks a status filter, expands a transcript, and prints one JSON
// object with what it saw. Usage: node html_report.cjs REPORT.html
// The Rust test tests/html_browser.rs runs it and judges the result.
const path = require("path");
const puppeteer = require("puppeteer-core");
const chromium = require("@sparticuz/chromium").default ?? require("@sparticuz/chromium");

(async () => {
  const file = path.resolve(process.argv[2]);
  const executablePath = await chromium.executablePath();
  const browser = await puppeteer.launch({ args: chromium.args, executablePath, headless: true });
  const out = { requests: [], consoleErrors: [] };
  try {
    const page = await browser.newPage();
    page.on("request", (r) => out.requests.push(r.url()));
    page.on("console", (m) => { if (m.type() === "error") out.consoleErrors.push(m.text()); });
    page.on("pageerror", (e) => out.consoleErrors.push(String(e)));
    await page.goto("file://" + file, { waitUntil: "load" });
    const visible = () => page.$$eval("details.case", (ds) =>
      ds.filter((d) => !d.hidden && d.getBoundingClientRect().height > 0).map((d) => d.dataset.status));
    out.title = await page.title();
    out.activeAtLoad = await page.$eval(".filters button.active", (b) => b.dataset.filter);
    out.visibleAtLoad = await visible();
    out.total = await page.$$eval("details.case", (ds) => ds.length);
    await page.click("#filter-pass");
    out.activeAfterPass = await page.$eval(".filters button.active", (b) => b.dataset.filter);
    out.visibleAfterPass = await visible();
    out.shownAfterPass = await page.$eval("#shown", (s) => s.textContent);
    await page.click("#filter-all");
    out.visibleAfterAll = (await visible()).length;
    await page.click("#filter-fail");
    out.visibleAfterFail = await visible();
    // Expand the first failing case: its transcript becomes visible.
    const id = await page.$eval("details.case[data-status=fail]", (d) => d.id);
    out.expanded = id;
    const sel = "#" + id.replace(/[.:]/g, "\\$&");
    out.openBefore = await page.$eval(sel, (d) => d.open);
    out.transcriptVisibleBefore = await page.$eval(`${sel} pre.transcript`, (p) => p.checkVisibility());
    await page.click(`${sel} > summary`);
    out.open = await page.$eval(sel, (d) => d.open);
    out.transcript = await page.$eval(`${sel} pre.transcript`, (p) => ({
      visible: p.checkVisibility(),
      height: p.getBoundingClientRect().height,
      text: p.innerText,
    }));
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.error(String(e && e.stack || e));
  process.exit(1);
});
