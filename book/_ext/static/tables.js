/* tables.js: each cell of a claims table and of a check table learns its column's header
   (data-label), which a phone shows before the cell where bookweb.css lays the table out as one
   card per row, its verdict first. Loaded on every page by book/_ext/bookweb.py; without scripts
   the phone still shows the verdict first, without the labels. */
document.addEventListener("DOMContentLoaded", () => {
  for (const table of document.querySelectorAll("table.claims-table, table.check-table")) {
    const heads = Array.from(table.querySelectorAll("thead th")).map((th) => th.textContent.trim());
    for (const row of table.querySelectorAll("tbody tr")) {
      Array.from(row.children).forEach((cell, i) => {
        if (heads[i] && !cell.dataset.label) cell.dataset.label = heads[i];
      });
    }
  }
});
