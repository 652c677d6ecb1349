;;; edit-server.el --- edit-server (diffusion FIM) for lsp-mode  -*- lexical-binding: t; -*-

;; Ghost text from edit-server through lsp-mode's inline completion (lsp-mode >= 9.0.1,
;; `lsp-inline-completion.el').  edit-server runs as an add-on server next to your language's own
;; server.  Next edits (textDocument/copilotInlineEdit) have no lsp-mode UI yet.
;;
;; Install: put this file on `load-path', then
;;   (require 'edit-server)
;; and open a file in a project with lsp-mode (M-x lsp).  Accept / cycle with the keys of
;; `lsp-inline-completion-active-map' (RET accepts, C-n / C-p cycle, C-g cancels); ask explicitly
;; with M-x lsp-inline-completion-display (bound to C-c C-i below).

;;; Code:

(require 'lsp-mode)
(require 'lsp-inline-completion nil t)

(defgroup edit-server nil
  "edit-server: diffusion-model FIM suggestions for lsp-mode."
  :group 'lsp-mode)

(defcustom edit-server-command '("edit-server")
  "Command that starts the server on stdio, e.g. (\"/path/to/.venv/bin/edit-server\")."
  :type '(repeat string))

(defcustom edit-server-initialization-options
  '(:model "default" :device "auto" :gate (:enabled t))
  "Server settings sent as initializationOptions (camelCase keys, README \"Settings\")."
  :type 'plist)

(defcustom edit-server-idle-delay 0.3
  "Seconds of idle time before ghost text is asked for; nil = only on request."
  :type '(choice (const nil) number))

(lsp-register-client
 (make-lsp-client
  :new-connection (lsp-stdio-connection (lambda () edit-server-command))
  :activation-fn (lambda (_file-name _mode) t)
  :add-on? t
  :priority -2
  :server-id 'edit-server
  :initialization-options (lambda () edit-server-initialization-options)))
;; lsp-mode releases that declare textDocument.inlineCompletion get ghost text only; older ones are also
;; offered the suggestion as a completion item (company / completion-at-point).

(defvar-local edit-server--timer nil)

(defun edit-server--active-p ()
  "Non-nil when edit-server serves the current buffer."
  (and (bound-and-true-p lsp-mode)
       (seq-some (lambda (ws) (eq (lsp--client-server-id (lsp--workspace-client ws)) 'edit-server))
                 (lsp-workspaces))))

(defun edit-server--idle ()
  (when (and (edit-server--active-p) (fboundp 'lsp-inline-completion-display)
             (not (minibufferp)) (not buffer-read-only))
    (lsp-inline-completion-display t)))

(defun edit-server--after-change (&rest _)
  (when (and edit-server-idle-delay (edit-server--active-p))
    (when edit-server--timer (cancel-timer edit-server--timer))
    (setq edit-server--timer
          (run-with-idle-timer edit-server-idle-delay nil
                               (let ((buf (current-buffer)))
                                 (lambda () (when (buffer-live-p buf)
                                              (with-current-buffer buf (edit-server--idle)))))))))

(defun edit-server--setup ()
  (when (edit-server--active-p)
    (if (fboundp 'lsp-inline-completion-mode)
        (lsp-inline-completion-mode 1) ; newer lsp-mode: its own idle trigger
      (add-hook 'after-change-functions #'edit-server--after-change nil t))
    (local-set-key (kbd "C-c C-i") #'lsp-inline-completion-display)))

(add-hook 'lsp-after-open-hook #'edit-server--setup)

(provide 'edit-server)
;;; edit-server.el ends here
